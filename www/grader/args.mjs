// Command lines, read by Node's util.parseArgs from one table per command: the
// same table parses the arguments, checks their values and writes the --help text.
// The tables of ./lab's commands are in commands.mjs; platform.mjs keeps its own.
//
// A table: { prog, summary, synopsis, options, positionals: {min, max, files (they
//   are files: an unknown option says a file named -x goes after --)}, notes,
//   check(values, positionals): throws a UsageError for what no one option can say }.
// An option: { type: 'string' | 'boolean', value: 'N' (the placeholder in the help),
//   help, default (the value when not given), defaultText (the help's word for it,
//   when the default is not a plain value), choices ([name] or [{name, help}]),
//   multiple (repeatable: an array), short ('h'), parse (text → value, or throw
//   UsageError), path (a file or folder: parsed to an absolute path, a relative one
//   taken from the caller's folder, callerPath), hidden (parsed, left out of the
//   help: for the tests and scripts) }.
// Positionals, as Unix tools take them: after `--` everything is one, a file named
// `-2.py` too.
// No imports beyond Node's: ./lab --help runs it before anything is installed.
import path from 'node:path';
import { parseArgs as utilParseArgs } from 'node:util';

/** The environment variable in which ./lab, which works in its checkout, names the
 *  folder it was run from. */
export const CALLER_DIR_ENV = 'DELIVERY_LAB_CALLER_DIR';

// Read once and taken out of the environment, so that no process this one starts
// (a test's own `node grade.mjs` in a folder of its choosing, say) takes it for its own.
const CALLER_DIR = (() => {
  const dir = process.env[CALLER_DIR_ENV];
  delete process.env[CALLER_DIR_ENV];
  return dir && path.isAbsolute(dir) ? dir : process.cwd();
})();

/** A path from the command line, absolute: a relative one is taken from the folder
 *  the command was run from (./lab's caller's, else this process's own). */
export const callerPath = (p) => path.resolve(CALLER_DIR, p);

/** The folder the command was run from (a path printed for its user is relative to it). */
export const callerDir = () => CALLER_DIR;

/** A command line that cannot be run: exit 2, the message, and where the options are. */
export class UsageError extends Error {
  constructor(message) {
    super(message);
    this.name = 'UsageError';
    this.usage = true;
  }
}

/** Whether `argv` asks for help: --help or -h before a `--`. */
export function wantsHelp(argv) {
  for (const a of argv) {
    if (a === '--') return false;
    if (a === '--help' || a === '-h') return true;
  }
  return false;
}

const WIDTH = 100;
const COLUMN = 28;

/** `text` wrapped to `width` columns, each line after the first indented by `indent`. */
export function wrap(text, width, indent) {
  const out = [];
  for (const para of String(text).split('\n')) {
    let line = '';
    for (const word of para.split(/ +/)) {
      if (line && line.length + 1 + word.length > width) {
        out.push(line);
        line = word;
      } else line = line ? `${line} ${word}` : word;
    }
    out.push(line);
  }
  return out.join(`\n${' '.repeat(indent)}`);
}

const choiceName = (c) => (typeof c === 'string' ? c : c.name);

/** The option as the help's left column shows it: `--jobs N`, `-h, --help`. */
function flagText(name, o) {
  const flag = `${o.short ? `-${o.short}, ` : ''}--${name}`;
  return o.type === 'string' ? `${flag} ${o.value ?? 'VALUE'}` : flag;
}

/**
 * A command from its table: { ...table, help(): string, parse(argv) }. parse returns
 * { help: true } when --help or -h is given (anywhere before `--`, whatever else is
 * there), else { values, positionals }: each option's value (parsed, or its default),
 * the positionals in order. Any other command line throws a UsageError.
 */
export function command(table) {
  const options = { ...table.options, help: { type: 'boolean', short: 'h', help: 'print this help and exit' } };
  const positionals = { min: 0, max: Infinity, ...table.positionals };

  function help() {
    const lines = [`usage: ${table.prog}${table.synopsis ? ` ${table.synopsis}` : ''}`];
    if (table.summary) lines.push('', wrap(table.summary, WIDTH, 0));
    const shown = Object.entries(options).filter(([, o]) => !o.hidden);
    lines.push('', 'options:');
    for (const [name, o] of shown) {
      const dflt = o.defaultText ?? (o.default !== undefined && o.default !== false && !(Array.isArray(o.default) && !o.default.length) ? String(o.default) : null);
      const described = (o.choices ?? []).filter((c) => typeof c !== 'string');
      let text = o.help ?? '';
      if (o.choices && !described.length && !String(o.value).includes('|')) text += ` (${o.choices.join(', ')})`;
      if (dflt !== null && !described.length) text += ` (default: ${dflt})`;
      if (o.multiple) text += ' [repeatable]';
      const flag = `  ${flagText(name, o)}`;
      const body = wrap(text, WIDTH - COLUMN, COLUMN);
      lines.push(flag.length < COLUMN ? `${flag.padEnd(COLUMN)}${body}` : `${flag}\n${' '.repeat(COLUMN)}${body}`);
      if (described.length) {
        const w = Math.max(...o.choices.map((c) => choiceName(c).length)) + 2;
        for (const c of o.choices) {
          lines.push(`${' '.repeat(COLUMN)}${choiceName(c).padEnd(w)}${wrap(typeof c === 'string' ? '' : c.help, WIDTH - COLUMN - w, COLUMN + w)}`.trimEnd());
        }
        if (dflt !== null) lines.push(`${' '.repeat(COLUMN)}(default: ${dflt})`);
      }
    }
    if (table.notes) lines.push('', wrap(table.notes, WIDTH, 0));
    return `${lines.join('\n')}\n`;
  }

  function parse(argv) {
    if (wantsHelp(argv)) return { help: true };
    const spec = {};
    for (const [name, o] of Object.entries(options)) {
      spec[name] = { type: o.type, ...(o.short ? { short: o.short } : {}), ...(o.multiple ? { multiple: true } : {}) };
    }
    let parsed;
    try {
      parsed = utilParseArgs({ args: argv, options: spec, strict: true, allowPositionals: true });
    } catch (e) {
      const usage = usageOf(e);
      // A file whose name starts with - (-2.py) reads as short options: say how to give it.
      if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && positionals.files && /^-[^-]/.test(usage.option)) usage.message += ` (a file whose name starts with - goes after --: ${table.prog} [options] -- FILE...)`;
      throw usage;
    }
    const values = {};
    for (const [name, o] of Object.entries(options)) {
      if (name === 'help') continue;
      let v = parsed.values[name];
      if (v === undefined) {
        values[name] = Array.isArray(o.default) ? [...o.default] : o.default;
        continue;
      }
      const one = (text) => {
        if (o.choices && !o.choices.some((c) => choiceName(c) === text)) {
          throw new UsageError(`--${name} must be ${orList(o.choices.map(choiceName))}, not ${text === '' ? 'nothing' : text}`);
        }
        if (o.type === 'string' && text === '' && !o.parse) throw new UsageError(`--${name} needs a value (${o.value ?? 'VALUE'})`);
        if (o.path) return callerPath(text);
        return o.parse ? o.parse(text, `--${name}`) : text;
      };
      v = o.type === 'boolean' ? v : o.multiple ? v.map(one) : one(v);
      values[name] = v;
    }
    const pos = parsed.positionals;
    if (pos.length < positionals.min) throw new UsageError(positionals.missing ?? `give ${positionals.name ?? 'an argument'}`);
    if (pos.length > positionals.max) {
      throw new UsageError(positionals.max === 0 ? `takes no argument, not ${pos[0]}` : `too many arguments: ${pos.slice(positionals.max).join(' ')}`);
    }
    // What no one option can say (a positional's values, options that go together).
    table.check?.(values, pos);
    return { values, positionals: pos };
  }

  return { ...table, options, help, parse };
}

/** "a, b or c" */
export function orList(items) {
  return items.length < 2 ? items.join('') : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;
}

/** util.parseArgs's error as the command's UsageError, in this project's words. */
function usageOf(e) {
  const name = /'(-{1,2}[^' ]+)/.exec(e.message)?.[1] ?? '';
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return Object.assign(new UsageError(`unknown option ${name}`), { option: name });
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      if (/does not take an argument/.test(e.message)) return new UsageError(`${name} takes no value`);
      if (/ambiguous/.test(e.message)) return new UsageError(`${name} needs a value (give ${name}=VALUE for one that starts with -)`);
      return new UsageError(`${name} needs a value`);
    default:
      return new UsageError(e.message.split('\n')[0]);
  }
}

/** A whole or decimal number option's parse: `{int, min, max}`. */
export function number({ int = false, min, max } = {}) {
  return (text, flag) => {
    const n = Number(text);
    const bad = text.trim() === '' || !Number.isFinite(n) || (int && !Number.isInteger(n)) || (min !== undefined && n < min) || (max !== undefined && n > max);
    if (bad) {
      const range = min !== undefined && max !== undefined ? ` from ${min} to ${max}` : min !== undefined && min !== 0 ? ` of at least ${min}` : '';
      throw new UsageError(`${flag} needs a ${int ? 'whole ' : ''}number${range}, not ${text === '' ? 'nothing' : text}`);
    }
    return n;
  };
}

/**
 * Runs `cmd.parse(argv)` for a script's main: on --help prints the help to stdout
 * and exits 0; on a UsageError prints `NAME: message` and the synopsis to stderr and
 * exits 2. Returns { values, positionals } otherwise.
 */
export function parseOrExit(cmd, argv, name = cmd.name) {
  let r;
  try {
    r = cmd.parse(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    usageExit(cmd, e.message, name);
  }
  if (r.help) {
    process.stdout.write(cmd.help());
    process.exit(0);
  }
  return r;
}

/** Exits 2 with `NAME: message`, the command's synopsis and where its options are listed. */
export function usageExit(cmd, message, name = cmd.name) {
  process.stderr.write(`${name}: ${message}\nusage: ${cmd.prog}${cmd.synopsis ? ` ${cmd.synopsis}` : ''}\n(${cmd.prog} --help lists every option)\n`);
  process.exit(2);
}
