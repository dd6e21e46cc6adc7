// The types of headless.mjs (a plain script, run with node), for the
// TypeScript tests that run it (test/browser.test.ts).

/** What the page reported (app.js's `go`): what it saw, or how it failed. */
export type HeadlessOutcome =
  | { ok: true; sandboxId: string; stdout: string; chunks: number; file: string; missing: string }
  | { ok: false; error: string; reason?: string };

/** Serves the page, runs it in headless Chromium, and answers what it reported. */
export function runHeadless(options: {
  host: string;
  apiKey: string;
  port?: number;
  ca?: string;
  chromium?: string;
  timeoutMs?: number;
}): Promise<HeadlessOutcome>;
