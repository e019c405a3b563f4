// The publisher loop every bench here shares: the same sends, the same window, for every
// system (run.mjs's throughput, durable.mjs's acknowledged rate).
import { makePayload } from './payload.mjs';

/** Send `count` payloads keeping at most `window` unacknowledged; returns when all are. */
export async function blast(publisher, count, window, size, run) {
  let inflight = 0;
  let failure = null;
  let wake = null;
  const settle = () => {
    inflight--;
    if (wake && inflight < window) { const w = wake; wake = null; w(); }
  };
  const fail = (error) => { failure ??= error; settle(); };
  for (let seq = 0; seq < count;) {
    while (inflight < window && seq < count) {
      const pending = publisher.send(makePayload(size, run, seq++));
      if (pending) {
        inflight++;
        pending.then(settle, fail);
      }
      if (publisher.flush && seq % window === 0) await publisher.flush();
    }
    if (inflight >= window) await new Promise((resolve) => { wake = resolve; });
    if (failure) throw failure;
  }
  while (inflight > 0) await new Promise((resolve) => { wake = resolve; });
  if (publisher.flush) await publisher.flush();
  if (failure) throw failure;
}
