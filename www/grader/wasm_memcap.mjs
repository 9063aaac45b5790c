// Caps the maximum of the memory a WebAssembly module defines (its memory
// section), so that a program that allocates without end hits the cap inside the
// module (Python raises MemoryError) instead of growing the process until the
// host kills it. Pyodide's pyodide.asm.wasm defines its own memory (it is not
// created from JS with `new WebAssembly.Memory`), so the cap has to be written
// into the binary before it is compiled.

function readLeb(bytes, pos) {
  let result = 0, shift = 0, byte;
  do {
    byte = bytes[pos++];
    result += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [result, pos];
}

function leb(n) {
  const out = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n) byte |= 0x80;
    out.push(byte);
  } while (n);
  return out;
}

/**
 * Returns a copy of `bytes` whose defined memories have `maximum` at most
 * `maxPages` (64 KiB pages), or `bytes` itself when it defines no memory.
 * Also returns what it found, for tests and the report.
 */
export function capWasmMemory(bytes, maxPages) {
  bytes = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  if (bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) throw new Error('not a wasm binary');
  let pos = 8;
  while (pos < bytes.length) {
    const id = bytes[pos];
    const [size, body] = readLeb(bytes, pos + 1);
    if (id === 5) {
      let p = body;
      let count;
      [count, p] = readLeb(bytes, p);
      const out = [...leb(count)];
      const found = [];
      for (let i = 0; i < count; i++) {
        const flags = bytes[p++];
        if (flags & 0x04) throw new Error('memory64 is not supported by the cap');
        let initial, maximum;
        [initial, p] = readLeb(bytes, p);
        if (flags & 0x01) [maximum, p] = readLeb(bytes, p);
        found.push({ initial, maximum });
        const max = Math.max(initial, Math.min(maximum ?? Infinity, maxPages));
        out.push(flags | 0x01, ...leb(initial), ...leb(max));
      }
      const section = [5, ...leb(out.length), ...out];
      const result = new Uint8Array(bytes.length - (body + size - pos) + section.length);
      result.set(bytes.subarray(0, pos), 0);
      result.set(section, pos);
      result.set(bytes.subarray(body + size), pos + section.length);
      return { bytes: result, memories: found };
    }
    pos = body + size;
  }
  return { bytes, memories: [] };
}
