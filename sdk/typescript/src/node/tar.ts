/**
 * A host directory as a tar stream (POSIX ustar, with PAX records for
 * names and link targets past ustar's fields), read as it is sent: a
 * template build's context. Files, directories and symbolic links are
 * packed (owners as root, permissions kept); other kinds and what the
 * ignore patterns name are left out. Paths are relative to the directory,
 * `/`-separated.
 */

import { lstat, open, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";

import { InvalidArgumentError } from "../errors.js";

const BLOCK = 512;
/** File data goes in pieces of this size. */
const PIECE = 256 * 1024;
const encoder = new TextEncoder();

/** `value` as a NUL-terminated octal field of `width` bytes. */
function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

function put(block: Uint8Array, offset: number, width: number, text: string): void {
  block.set(encoder.encode(text).subarray(0, width), offset);
}

/** One PAX record: "LENGTH KEY=VALUE\n", LENGTH counting itself. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  const bytes = encoder.encode(body).length;
  let length = bytes + String(bytes).length;
  if (String(length).length !== String(bytes).length) {
    length = bytes + String(length).length;
  }
  return `${length}${body}`;
}

interface Entry {
  name: string;
  type: "0" | "2" | "5" | "x";
  mode: number;
  size: number;
  mtime: number;
  link?: string;
}

function header(entry: Entry): Uint8Array {
  const block = new Uint8Array(BLOCK);
  put(block, 0, 100, entry.name);
  put(block, 100, 8, octal(entry.mode & 0o7777, 8));
  put(block, 108, 8, octal(0, 8));
  put(block, 116, 8, octal(0, 8));
  put(block, 124, 12, octal(entry.size, 12));
  put(block, 136, 12, octal(Math.max(0, Math.floor(entry.mtime)), 12));
  put(block, 148, 8, "        ");
  put(block, 156, 1, entry.type);
  put(block, 157, 100, entry.link ?? "");
  put(block, 257, 6, "ustar\0");
  put(block, 263, 2, "00");
  let sum = 0;
  for (const byte of block) {
    sum += byte;
  }
  put(block, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return block;
}

/** The headers of an entry: a PAX header first when its name or link does not fit ustar's fields. */
function headers(entry: Entry): Uint8Array[] {
  const long = (text: string | undefined): boolean => text !== undefined && encoder.encode(text).length > 99;
  if (!long(entry.name) && !long(entry.link)) {
    return [header(entry)];
  }
  let records = "";
  if (long(entry.name)) {
    records += paxRecord("path", entry.name);
  }
  if (long(entry.link)) {
    records += paxRecord("linkpath", entry.link ?? "");
  }
  const data = encoder.encode(records);
  const pax = header({ name: "././@PaxHeader", type: "x", mode: 0o644, size: data.length, mtime: entry.mtime });
  const short = (text: string): string => {
    let cut = text;
    while (encoder.encode(cut).length > 99) {
      cut = cut.slice(0, -1);
    }
    return cut;
  };
  return [pax, ...padded(data), header({ ...entry, name: short(entry.name), link: entry.link && short(entry.link) })];
}

/** `data` and zeros to a whole number of blocks. */
function padded(data: Uint8Array): Uint8Array[] {
  const rest = data.length % BLOCK;
  return rest === 0 ? [data] : [data, new Uint8Array(BLOCK - rest)];
}

/** A file's contents in pieces, exactly `size` bytes (a file that changed size while read is an error). */
async function* contents(path: string, size: number): AsyncGenerator<Uint8Array> {
  const file = await open(path, "r");
  try {
    let left = size;
    while (left > 0) {
      const piece = new Uint8Array(Math.min(PIECE, left));
      const { bytesRead } = await file.read(piece, 0, piece.length, size - left);
      if (bytesRead === 0) {
        throw new Error(`${path} became shorter while it was packed`);
      }
      left -= bytesRead;
      yield piece.subarray(0, bytesRead);
    }
  } finally {
    await file.close();
  }
}

/** An entry to pack. */
interface Found {
  path: string;
  full: string;
  kind: "dir" | "file" | "link";
}

/**
 * What of `dir` below `relative` is packed, depth first, sorted: files and
 * links `ignored` does not name; directories it does not name, and those it
 * names that hold something packed when `descend` (an exception may bring
 * back something inside an ignored directory, as in Docker).
 */
async function entries(
  dir: string,
  relative: string,
  ignored: (path: string) => boolean,
  descend: boolean,
): Promise<Found[]> {
  const found: Found[] = [];
  for (const name of (await readdir(join(dir, relative))).sort()) {
    const path = relative === "" ? name : `${relative}/${name}`;
    const full = join(dir, path);
    const stat = await lstat(full);
    const skipped = ignored(path);
    if (stat.isDirectory()) {
      if (skipped && !descend) {
        continue;
      }
      const inside = await entries(dir, path, ignored, descend);
      if (!skipped || inside.length > 0) {
        found.push({ path, full, kind: "dir" }, ...inside);
      }
    } else if (!skipped && (stat.isFile() || stat.isSymbolicLink())) {
      found.push({ path, full, kind: stat.isFile() ? "file" : "link" });
    }
  }
  return found;
}

/** The tar stream of `dir` (see the module's comment; `entries` says what is in it). */
export async function* tarDirectory(
  dir: string,
  ignored: (path: string) => boolean,
  descendIgnored: boolean,
): AsyncGenerator<Uint8Array> {
  const top = await lstat(dir).catch(() => undefined);
  if (top === undefined || !top.isDirectory()) {
    throw new InvalidArgumentError(`fileContextPath: ${dir} is not a directory`, { field: "fileContextPath" });
  }
  for (const { path, full, kind } of await entries(dir, "", ignored, descendIgnored)) {
    const stat = await lstat(full);
    const mtime = stat.mtimeMs / 1000;
    if (kind === "dir") {
      yield* headers({ name: `${path}/`, type: "5", mode: stat.mode, size: 0, mtime });
    } else if (kind === "link") {
      yield* headers({ name: path, type: "2", mode: stat.mode, size: 0, mtime, link: await readlink(full) });
    } else {
      yield* headers({ name: path, type: "0", mode: stat.mode, size: stat.size, mtime });
      yield* contents(full, stat.size);
      if (stat.size % BLOCK !== 0) {
        yield new Uint8Array(BLOCK - (stat.size % BLOCK));
      }
    }
  }
  yield new Uint8Array(2 * BLOCK);
}

/** `source`'s bytes in chunks of about `size` (small pieces joined, none split). */
export async function* coalesce(source: AsyncIterable<Uint8Array>, size: number): AsyncGenerator<Uint8Array> {
  let held: Uint8Array[] = [];
  let bytes = 0;
  const joined = (): Uint8Array => {
    const out = new Uint8Array(bytes);
    let at = 0;
    for (const piece of held) {
      out.set(piece, at);
      at += piece.length;
    }
    held = [];
    bytes = 0;
    return out;
  };
  for await (const piece of source) {
    if (bytes + piece.length > size && bytes > 0) {
      yield joined();
    }
    held.push(piece);
    bytes += piece.length;
  }
  if (bytes > 0) {
    yield joined();
  }
}
