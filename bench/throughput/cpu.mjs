// CPU time of the processes a run involves, so that the bench says who was the
// bottleneck: the server (a broker, or every daemon), the publisher (this process) and
// the subscribers' processes. Linux only (/proc); elsewhere every figure is null.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's utime and stime (`getconf CLK_TCK`), null without /proc. */
const TICKS = (() => {
  try {
    readFileSync('/proc/self/stat');
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return null;
  }
})();

/** CPU seconds (user + system, all threads) process `pid` has used, null when unknown. */
export function processCpuSeconds(pid) {
  if (TICKS === null || !pid) return null;
  let stat;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;  // gone
  }
  // The command name (field 2) is in parentheses and may hold spaces: count after it.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;  // utime, stime
}

/** A reading of every process of a run: `servers` and `subscribers` are pid lists. */
export function cpuSnapshot(servers, subscribers) {
  const usage = process.cpuUsage();
  return {
    at: process.hrtime.bigint(),
    servers: servers.map(processCpuSeconds),
    publisher: (usage.user + usage.system) / 1e6,
    subscribers: subscribers.map(processCpuSeconds),
  };
}

const sum = (values) => (values.some((v) => v === null) ? null
  : values.reduce((a, b) => a + b, 0));

/**
 * CPU microseconds per event between two snapshots: the servers together, the busiest
 * server alone (among several daemons, the one that bounds the rate), the publisher,
 * the subscribers together; and `cores`, every one of them together per wall second
 * (the machine's cores, all busy, is the ceiling for every system alike).
 */
export function cpuPerEvent(before, after, events) {
  const per = (seconds) => (seconds === null ? null : (seconds * 1e6) / events);
  const deltas = (key) => after[key].map((v, i) => (v === null || before[key][i] === null
    ? null : v - before[key][i]));
  const servers = deltas('servers');
  const subscribers = deltas('subscribers');
  const publisher = after.publisher - before.publisher;
  const wall = Number(after.at - before.at) / 1e9;
  const total = sum([sum(servers), publisher, sum(subscribers)]);
  return {
    server: per(sum(servers)),
    // Only among several servers (the daemons); null for one broker.
    busiestServer: servers.length < 2 || servers.includes(null) ? null
      : per(Math.max(...servers)),
    publisher: per(publisher),
    subscribers: per(sum(subscribers)),
    cores: total === null ? null : total / wall,
  };
}
