// Output framing for the NDJSON exec stream: bytes are decoded as UTF-8 (invalid bytes become
// U+FFFD, split characters wait for their next byte), cut into output events of at most 4096
// UTF-16 code units without splitting a surrogate pair, and counted against the output limit,
// which fails the command rather than truncating its output.

import { ApiError, LIMITS } from "./protocol.js";

const encoder = new TextEncoder();

export function line(event: Record<string, unknown>): Uint8Array {
  return encoder.encode(JSON.stringify(event) + "\n");
}

export class OutputFramer {
  private readonly decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  units = 0;

  constructor(private readonly limit: number) {}

  push(bytes: Uint8Array): string[] {
    return this.frames(this.decoder.decode(bytes, { stream: true }));
  }

  end(): string[] {
    return this.frames(this.decoder.decode());
  }

  private frames(text: string): string[] {
    if (text === "") return [];
    this.units += text.length;
    if (this.units > this.limit) {
      throw new ApiError(413, "output_limit", "Command output exceeded the bridge limit");
    }
    const pieces: string[] = [];
    for (let start = 0; start < text.length;) {
      let end = Math.min(start + LIMITS.frame, text.length);
      const last = text.charCodeAt(end - 1);
      if (end < text.length && last >= 0xd800 && last <= 0xdbff) end -= 1; // keep the pair together
      pieces.push(text.slice(start, end));
      start = end;
    }
    return pieces;
  }
}
