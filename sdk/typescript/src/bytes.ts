/**
 * Bytes in and out: what callers may pass as data (strings, byte arrays,
 * Blobs, web streams, Node streams and other async iterables), read as
 * chunks of a bounded size; and text decoded across chunk boundaries.
 */

/** Data a file or a program's stdin may be given. */
export type DataSource =
  | string
  | ArrayBuffer
  | ArrayBufferView
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | Iterable<Uint8Array>;

/** The most bytes in one message of data (the server's chunk bound). */
export const CHUNK_BYTES = 1024 * 1024;

const encoder = new TextEncoder();

/** Bytes of a string, a buffer or a view of one. */
export function toBytes(data: string | ArrayBuffer | ArrayBufferView): Uint8Array {
  if (typeof data === "string") {
    return encoder.encode(data);
  }
  if (data instanceof Uint8Array) {
    return data;
  }
  if (ArrayBuffer.isView(data)) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  return new Uint8Array(data);
}

function isReadableStream(data: unknown): data is ReadableStream<Uint8Array> {
  return typeof (data as ReadableStream | null)?.getReader === "function";
}

function isBlob(data: unknown): data is Blob {
  return typeof Blob !== "undefined" && data instanceof Blob;
}

/** The source's pieces as they come, before sizing. */
async function* pieces(data: DataSource): AsyncGenerator<Uint8Array> {
  if (typeof data === "string" || data instanceof ArrayBuffer || ArrayBuffer.isView(data)) {
    yield toBytes(data);
    return;
  }
  if (isBlob(data)) {
    yield* pieces(data.stream() as ReadableStream<Uint8Array>);
    return;
  }
  if (isReadableStream(data)) {
    const reader = data.getReader();
    try {
      for (;;) {
        const read = await reader.read();
        if (read.done) {
          return;
        }
        yield toBytes(read.value);
      }
    } finally {
      reader.releaseLock();
    }
  }
  if (Symbol.asyncIterator in data) {
    for await (const piece of data as AsyncIterable<Uint8Array | string>) {
      yield toBytes(piece);
    }
    return;
  }
  for (const piece of data as Iterable<Uint8Array>) {
    yield toBytes(piece);
  }
}

/**
 * The source's bytes in chunks of at most `size` bytes: large pieces are
 * cut, small ones gathered (so a stream of 64 KiB reads goes as 1 MiB
 * messages). Empty data gives no chunk.
 */
export async function* chunks(data: DataSource, size = CHUNK_BYTES): AsyncGenerator<Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  const flush = (): Uint8Array => {
    const out = pending.length === 1 && pending[0] !== undefined ? pending[0] : concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    return out;
  };
  for await (let piece of pieces(data)) {
    while (piece.byteLength > 0) {
      const room = size - pendingBytes;
      const take = piece.byteLength <= room ? piece : piece.subarray(0, room);
      pending.push(take);
      pendingBytes += take.byteLength;
      piece = piece.subarray(take.byteLength);
      if (pendingBytes === size) {
        yield flush();
      }
    }
  }
  if (pendingBytes > 0) {
    yield flush();
  }
}

/** Arrays joined into one. */
export function concat(parts: Uint8Array[], length = parts.reduce((n, p) => n + p.byteLength, 0)): Uint8Array {
  const all = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    all.set(part, at);
    at += part.byteLength;
  }
  return all;
}

/** A stream's text: UTF-8 decoded as chunks come, characters kept whole across them. */
export class TextStream {
  private readonly decoder = new TextDecoder();
  private text = "";

  /** Adds a chunk; returns the text it completes. */
  push(data: Uint8Array): string {
    const piece = this.decoder.decode(data, { stream: true });
    this.text += piece;
    return piece;
  }

  /** Ends the stream; returns what was held back (an incomplete character). */
  end(): string {
    const piece = this.decoder.decode();
    this.text += piece;
    return piece;
  }

  /** All the text so far. */
  get value(): string {
    return this.text;
  }
}
