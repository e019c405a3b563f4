// Bench payloads: bytes 0-7 the send time (process.hrtime.bigint(), CLOCK_MONOTONIC, the
// same clock in every process of the machine), 8-11 the run number, 12-15 the sequence
// number, the rest filler. The same layout for every system.
export const STAMP_BYTES = 16;

export function makePayload(size, run, seq) {
  const payload = Buffer.alloc(Math.max(size, STAMP_BYTES), 0x61);
  payload.writeUInt32BE(run, 8);
  payload.writeUInt32BE(seq, 12);
  payload.writeBigUInt64BE(process.hrtime.bigint(), 0);
  return payload;
}

export function readStamp(payload) {
  const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  return { sentNs: view.getBigUint64(0), run: view.getUint32(8), seq: view.getUint32(12) };
}
