// The durable brokers the benches compare with, started from the distribution's packages on
// free loopback ports: NATS JetStream (file storage) and RabbitMQ. Each returns null when
// its server is not installed (bench/throughput/setup.sh installs them).
import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { freePort, startProcess, which } from './systems.mjs';

const run = promisify(execFile);

export async function jetstreamSystem(work, syncAlways) {
  const exe = which('nats-server');
  if (!exe) return null;
  const dir = path.join(work, `jetstream-${syncAlways ? 'always' : 'default'}`);
  await mkdir(dir, { recursive: true });
  const conf = path.join(dir, 'nats.conf');
  let broker;
  try {
    broker = await startProcess('nats-server', exe, async (port) => {
      await writeFile(conf, `listen: 127.0.0.1:${port}\njetstream {\n  store_dir: "${dir}"\n`
        + (syncAlways ? '  sync_interval: always\n' : '') + '}\n');
      return ['-c', conf];
    }, dir);
  } catch (error) {
    const { stdout } = await run(exe, ['--version']);
    throw new Error(`${error.message}; ${stdout.trim()} (sync_interval arrived in 2.10)`);
  }
  const { connect } = await import('nats');
  const servers = `127.0.0.1:${broker.port}`;
  const admin = await connect({ servers });
  const manager = await admin.jetstreamManager();
  await manager.streams.add({ name: 'BENCH', subjects: ['bench.>'], storage: 'file' });
  await admin.close();
  return {
    servers,
    async publisher(topic) {
      const client = await connect({ servers });
      const js = client.jetstream();
      return { send: (payload) => js.publish(`bench.${topic}`, payload),
        close: () => client.close() };
    },
    stop: broker.stop,
  };
}

export async function rabbitSystem(work) {
  const exe = which('rabbitmq-server');
  if (!exe) return null;
  // rabbitmq-server runs as the rabbitmq user: its directory must be open to it.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'overlay-durable-rabbitmq-'));
  await chmod(dir, 0o777);
  await writeFile(path.join(dir, 'enabled_plugins'), '[].\n');
  await writeFile(path.join(dir, 'rabbitmq.conf'), 'loopback_users = none\n');
  const envFor = async (port) => ({ ...process.env, RABBITMQ_NODENAME: `bench${port}@localhost`,
    RABBITMQ_NODE_PORT: String(port), RABBITMQ_DIST_PORT: String(await freePort()),
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_MNESIA_BASE: path.join(dir, 'mnesia'), RABBITMQ_LOG_BASE: path.join(dir, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: path.join(dir, 'enabled_plugins'),
    RABBITMQ_PID_FILE: path.join(dir, 'pid'), RABBITMQ_CONFIG_FILE: path.join(dir, 'rabbitmq'),
    RABBITMQ_FEATURE_FLAGS_FILE: path.join(dir, 'feature_flags') });
  const broker = await startProcess('rabbitmq-server', exe, () => [], dir,
    { envFor, group: true, timeout: 120_000 });
  const amqp = (await import('amqplib')).default;
  const url = `amqp://guest:guest@127.0.0.1:${broker.port}`;
  return {
    url,
    async publisher(topic) {
      const connection = await amqp.connect(url);
      const channel = await connection.createConfirmChannel();
      await channel.assertQueue(topic, { durable: true });
      return {
        send: (payload) => new Promise((resolve, reject) => {
          channel.sendToQueue(topic, payload, { persistent: true },
            (error) => (error ? reject(error) : resolve()));
        }),
        close: () => connection.close(),
      };
    },
    stop: async () => {
      // The Debian wrapper starts the Erlang VM through su, in a session of its own: a
      // signal to the wrapper's group does not reach it. Its pid file does.
      await stopPid(Number(await readFile(path.join(dir, 'pid'), 'utf8').catch(() => '0')));
      await broker.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** SIGTERM `pid`, SIGKILL it if it is still there after 15 s; returns once it is gone. */
export async function stopPid(pid) {
  const alive = () => { try { process.kill(pid, 0); return true; } catch { return false; } };
  if (!pid || !alive()) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 15_000;
  while (alive()) {
    if (Date.now() > deadline) { process.kill(pid, 'SIGKILL'); }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
