/**
 * gRPC-Web over `fetch`, for browsers and edge runtimes (and Node, when a
 * caller wants the web's path).
 *
 * `fetch` cannot stream a request body to a server everywhere (browsers
 * need HTTP/2 and `duplex: "half"`), so this transport sends every call's
 * request as one body: a unary or server-streaming call's one message, and
 * a client-streaming or bidirectional call's messages once its input has
 * ended. The SDK only opens such calls with finite inputs: a file is
 * written in bounded pieces (see `files.ts`), and a program's stream sends
 * only its start (stdin goes by `SendStdin`). Responses stream as they
 * arrive. The protocol itself (envelopes, trailers in the body, statuses)
 * is connect's gRPC-Web implementation.
 */

import type { Interceptor, Transport } from "@connectrpc/connect";
import type { UniversalClientFn, UniversalClientResponse } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-grpc-web";

/** The largest message either way (the server's bound, 4 MiB), with room for framing. */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024 + 64 * 1024;

/** Every byte of an iterable of chunks, in one array. */
async function collect(body: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let length = 0;
  for await (const part of body) {
    parts.push(part);
    length += part.byteLength;
  }
  if (parts.length === 1 && parts[0] !== undefined) {
    return parts[0];
  }
  const all = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    all.set(part, at);
    at += part.byteLength;
  }
  return all;
}

/** A response body as the async iterable connect reads. */
function chunksOf(body: ReadableStream<Uint8Array> | null): AsyncIterable<Uint8Array> {
  const reader = body?.getReader();
  return {
    [Symbol.asyncIterator]() {
      return {
        async next(): Promise<IteratorResult<Uint8Array>> {
          if (reader === undefined) {
            return { done: true, value: undefined };
          }
          const read = await reader.read();
          return read.done ? { done: true, value: undefined } : { done: false, value: read.value };
        },
        async throw(reason?: unknown): Promise<IteratorResult<Uint8Array>> {
          await reader?.cancel(reason);
          return { done: true, value: undefined };
        },
        async return(): Promise<IteratorResult<Uint8Array>> {
          await reader?.cancel();
          return { done: true, value: undefined };
        },
      };
    },
  };
}

/** An HTTP client on `fetch` that sends each request body whole. */
function bufferedFetchClient(fetchFn: typeof globalThis.fetch): UniversalClientFn {
  return async (request): Promise<UniversalClientResponse> => {
    const body = request.body === undefined ? undefined : await collect(request.body);
    const header = new Headers(request.header);
    // A browser may not set it, and it would need a CORS preflight entry.
    header.delete("user-agent");
    const response = await fetchFn(request.url, {
      method: request.method,
      headers: header,
      body: body as BodyInit | undefined,
      signal: request.signal,
      redirect: "error",
      credentials: "omit",
    });
    return {
      status: response.status,
      header: response.headers,
      body: chunksOf(response.body),
      trailer: new Headers(),
    };
  };
}

/** Options of {@link createWebTransport}. */
export interface WebTransportOptions {
  /** The server's URL (`https://HOST:PORT`). */
  baseUrl: string;
  /** The fetch to use (default `globalThis.fetch`). */
  fetch?: typeof globalThis.fetch;
  interceptors?: Interceptor[];
}

/** A gRPC-Web transport over `fetch` for every kind of call. */
export function createWebTransport(options: WebTransportOptions): Transport {
  const fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
  return createTransport({
    httpClient: bufferedFetchClient(fetchFn),
    baseUrl: options.baseUrl,
    useBinaryFormat: true,
    interceptors: options.interceptors ?? [],
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: MAX_MESSAGE_BYTES,
    writeMaxBytes: MAX_MESSAGE_BYTES,
  });
}
