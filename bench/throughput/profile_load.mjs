// A steady load on one daemon for profiling it (py-spy, perf): a publisher pipelining
// `window` publishes and one subscriber, both through clients/js, for `seconds`.
//   node bench/throughput/profile_load.mjs API_SOCKET [seconds=10] [reliable=0] [size=100]
//        [SUBSCRIBER_API_SOCKET (default: the publisher's)]
import { connect } from '@overlay/client';

import { makePayload } from './payload.mjs';

const [api, seconds = '10', reliable = '0', size = '100', subscriberApi = api] =
  process.argv.slice(2);
const subscriber = await connect(subscriberApi);
let received = 0;
await subscriber.subscribe('profile', { onEvent: () => { received++; } });
const publisher = await connect(api);
const window = 512;
const until = Date.now() + Number(seconds) * 1000;
let inflight = 0;
let sent = 0;
await new Promise((resolve) => {
  const pump = () => {
    while (inflight < window && Date.now() < until) {
      inflight++;
      publisher.publish('profile', { payload: makePayload(Number(size), 1, sent++),
        reliable: reliable === '1' }).then(() => { inflight--; pump(); });
    }
    if (inflight === 0) resolve();
  };
  pump();
});
console.log(`${sent} published, ${received} received in ${seconds} s: `
  + `${(received / Number(seconds) / 1000).toFixed(1)}k/s`);
publisher.close();
subscriber.close();
