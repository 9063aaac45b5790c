// The code editor (CodeMirror 6) and the read-only code views.
import { EditorView, basicSetup } from 'codemirror';
import { python, pythonLanguage } from '@codemirror/lang-python';
import { indentWithTab } from '@codemirror/commands';
import { indentUnit, syntaxHighlighting } from '@codemirror/language';
import { EditorState, Prec } from '@codemirror/state';
import { keymap } from '@codemirror/view';
import { highlightCode, classHighlighter } from '@lezer/highlight';

const theme = EditorView.theme({
  '&': { height: '100%', fontSize: '14px' },
  '.cm-scroller': { fontFamily: 'var(--mono)', lineHeight: '1.5' },
  '.cm-content': { padding: '8px 0' },
  '.cm-gutters': { background: 'var(--code-bg)', borderRight: '1px solid var(--line)' },
  // CodeMirror's own focus mark is a 1px dotted line; the page's focus ring instead.
  '&.cm-focused': { outline: '2px solid var(--accent)', outlineOffset: '-2px' },
  // The page's colours (style.css), so that the dark theme reaches the editor too.
  '.cm-cursor, .cm-dropCursor': { borderLeftColor: 'var(--ink)' },
  '.cm-activeLine': { background: 'var(--active-line)' },
  '.cm-activeLineGutter': { background: 'var(--active-line)' },
  '.cm-gutterElement': { color: 'var(--muted)' },
  '&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-selectionBackground': { background: 'var(--selection)' },
  '.cm-matchingBracket': { background: 'var(--selection) !important', color: 'inherit !important' },
});
// The tok-* classes, coloured by style.css in both themes (CodeMirror's default colours
// are for a light page only; with a highlighter of its own it steps aside).
const highlight = syntaxHighlighting(classHighlighter);

/**
 * The content element is the editor's tab stop and textbox: it gets a name, and an
 * explicit tabindex (it is focusable as contenteditable anyway; this also says so to
 * checkers that do not count contenteditable, and makes a read-only view a tab stop,
 * so its scroller can be reached and scrolled by keyboard).
 */
const contentA11y = (attrs) => EditorView.contentAttributes.of({ tabindex: '0', ...attrs });

/**
 * The learner's editor. Tab indents (Escape then Tab leaves the editor, as
 * CodeMirror documents; `help` is the id of the text that says so), Python's
 * four-space indent, Ctrl/Cmd+Enter runs.
 */
export function createEditor(parent, doc, { onChange, onRun, help }) {
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc,
      extensions: [
        basicSetup,
        highlight,
        python(),
        indentUnit.of('    '),
        EditorState.tabSize.of(4),
        keymap.of([indentWithTab]),
        // Highest precedence: basicSetup binds Mod-Enter to "insert blank line".
        Prec.highest(keymap.of([{ key: 'Mod-Enter', run: () => { onRun(); return true; } }])),
        EditorView.updateListener.of((u) => { if (u.docChanged) onChange(u.state.doc.toString()); }),
        contentA11y({ 'aria-label': 'Your code, solution.py', ...(help ? { 'aria-describedby': help } : {}) }),
        theme,
      ],
    }),
  });
  return {
    view,
    getCode: () => view.state.doc.toString(),
    /** Replaces the whole text as one undoable change. */
    setCode(text) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: String(text) } });
    },
    focus: () => view.focus(),
    /** The line of `def name(` (1-based), or null when the code defines no such function. */
    lineOfFunction(name) {
      const re = new RegExp(`^\\s*(async\\s+)?def\\s+${name.replace(/[^A-Za-z0-9_]/g, '')}\\s*\\(`);
      const doc = view.state.doc;
      for (let i = 1; i <= doc.lines; i++) if (re.test(doc.line(i).text)) return i;
      return null;
    },
    goToLine(n) {
      const line = view.state.doc.line(Math.max(1, Math.min(n, view.state.doc.lines)));
      view.dispatch({ selection: { anchor: line.from, head: line.to }, scrollIntoView: true });
      view.focus();
    },
  };
}

/** A read-only view of Python code named `label` (the side-by-side comparison). */
export function createViewer(parent, doc, label) {
  return new EditorView({
    parent,
    state: EditorState.create({
      doc,
      extensions: [basicSetup, python(), EditorState.readOnly.of(true), EditorView.editable.of(false),
        contentA11y({ 'aria-label': label }), theme, highlight],
    }),
  });
}

/** Python highlighted into `el` with tok-* classes (for code blocks in the instructions). */
export function highlightPython(el, code) {
  el.textContent = '';
  const tree = pythonLanguage.parser.parse(code);
  highlightCode(code, tree, classHighlighter,
    (text, classes) => {
      if (!classes) { el.append(text); return; }
      const span = document.createElement('span');
      span.className = classes;
      span.textContent = text;
      el.append(span);
    },
    () => el.append('\n'));
}
