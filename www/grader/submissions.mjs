// Reading submissions: which files a folder holds, a file's text read safely (a
// regular file, no link, bounded, UTF-8), and what cannot be graded at all.
import fs from 'node:fs';
import path from 'node:path';

/** The .py files at the top of `dir`, sorted: files, and links too (which
 *  readSubmission then refuses, so they are reported rather than passed over). */
export function pyFilesIn(dir) {
  const fileOrLink = (n) => {
    try {
      const st = fs.lstatSync(path.join(dir, n));
      return st.isFile() || st.isSymbolicLink();
    } catch {
      return false;
    }
  };
  return fs.readdirSync(dir).filter((n) => n.endsWith('.py') && fileOrLink(n)).sort();
}

/** The longest submission read (a learner's file is a few KB). */
export const SUBMISSION_CAP_BYTES = 1 << 20;

/**
 * A submission's text, or why it cannot be graded. Only a regular file is read, and
 * never through a link: submissions come from learners' archives, and a link would
 * have the coordinator, with staff's rights, read and grade whatever it points to
 * (the lab's reference, a hidden case file).
 */
export function readSubmission(file) {
  let fd;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (e) {
    if (e.code === 'ELOOP') return { error: 'The submission is a link, not a file, so no test ran. Submit the file itself.' };
    throw e;
  }
  let bytes;
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) return { error: 'The submission is not a regular file, so no test ran.' };
    if (st.size > SUBMISSION_CAP_BYTES) return { error: `The submission is larger than ${SUBMISSION_CAP_BYTES >> 20} MB, so no test ran.` };
    bytes = fs.readFileSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    return { text: new TextDecoder('utf-8', { fatal: true }).decode(bytes) };
  } catch {
    return { error: 'The file is not valid UTF-8 text, so no test ran. Save it as UTF-8.' };
  }
}

/** Submissions that cannot be graded without running anything: the message, or null. */
export function precheck(source) {
  if (typeof source !== 'string') return 'The submission is not text, so no test ran.';
  if (source.trim() === '') return 'The submission is empty, so no test ran.';
  return null;
}
