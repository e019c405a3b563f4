// Frames of the local API: a 4-byte unsigned big-endian length N, then N bytes holding
// one CBOR map. This file knows the framing and the CBOR settings, nothing of requests.
import { Encoder } from 'cbor-x';

/** The daemon's default `max_frame` (1 MiB), used until `hello` tells the real one. */
export const DEFAULT_MAX_FRAME = 1 << 20;

// Plain CBOR both ways: no cbor-x record extension (tag 105, unknown to other CBOR
// libraries), byte strings for Uint8Array/Buffer (no typed-array tag), maps decoded as
// plain objects. 64-bit integers decode as BigInt (see normalizeInt).
export const cbor = new Encoder({
  useRecords: false,
  mapsAsObjects: true,
  tagUint8Array: false,
});

/** A frame (length prefix + CBOR) for one map. */
export function encodeFrame(map) {
  return frameBytes(cbor.encode(map));
}

/** Prefix CBOR bytes with their length. */
export function frameBytes(body) {
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  frame.set(body, 4);
  return frame;
}

/** Bytes of a CBOR array header for `n` items. */
export function arrayHeader(n) {
  if (n < 24) return Buffer.from([0x80 | n]);
  if (n < 0x100) return Buffer.from([0x98, n]);
  if (n < 0x10000) return Buffer.from([0x99, n >> 8, n & 0xff]);
  const header = Buffer.allocUnsafe(5);
  header[0] = 0x9a;
  header.writeUInt32BE(n, 1);
  return header;
}

/**
 * An integer that came as a CBOR 64-bit integer is a BigInt; one JavaScript can hold
 * exactly becomes a number again, so that small values never surprise a caller.
 */
export function normalizeInt(value) {
  if (typeof value === 'bigint' && value >= Number.MIN_SAFE_INTEGER
      && value <= Number.MAX_SAFE_INTEGER) {
    return Number(value);
  }
  return value;
}

/** Raised when the byte stream from the daemon cannot be framed or decoded. */
export class FrameError extends Error {}

/**
 * Splits a byte stream into frame bodies. Chunks are kept as they come until a whole
 * frame is there, then joined once (a 1 MiB frame arriving in 64 KiB reads is copied
 * once, not once per read).
 */
export class FrameReader {
  /** @param {number} maxFrame largest body accepted */
  constructor(maxFrame) {
    this.maxFrame = maxFrame;
    this.chunks = [];
    this.buffered = 0;
  }

  /**
   * Feed one chunk; calls `onBody(body)` for every whole frame body now available.
   * @param {Buffer} chunk
   * @param {(body: Buffer) => void} onBody
   */
  push(chunk, onBody) {
    let buf;
    if (this.buffered === 0) {
      buf = chunk;
    } else {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
      if (this.buffered < 4) return;
      const length = this._pendingLength();
      if (length > this.maxFrame) {
        throw new FrameError(`frame of ${length} bytes exceeds the limit of ${this.maxFrame}`);
      }
      if (this.buffered < 4 + length) return;
      buf = Buffer.concat(this.chunks, this.buffered);
      this.chunks = [];
      this.buffered = 0;
    }
    let offset = 0;
    while (buf.length - offset >= 4) {
      const length = buf.readUInt32BE(offset);
      if (length > this.maxFrame) {
        throw new FrameError(`frame of ${length} bytes exceeds the limit of ${this.maxFrame}`);
      }
      if (buf.length - offset - 4 < length) break;
      onBody(buf.subarray(offset + 4, offset + 4 + length));
      offset += 4 + length;
    }
    if (offset < buf.length) {
      const rest = buf.subarray(offset);
      this.chunks = [rest];
      this.buffered = rest.length;
    }
  }

  _pendingLength() {
    const head = this.chunks[0].length >= 4 ? this.chunks[0] : Buffer.concat(this.chunks);
    return head.readUInt32BE(0);
  }
}
