#!/usr/bin/env node
// hilock's peers, measured the way build/hilock-bench measures hilock:
// npm's redis-semaphore (Mutex) and redlock, on ioredis, against the same
// redis-server. Prints the same JSON lines, with "client" naming the peer.
//
//   node peers.js --url redis://127.0.0.1:PORT --client redis-semaphore|redlock
//                 [--handoffs N] [--herd P:W,P:W,...] [--hold-us US] [--lat-dir DIR]
//   node peers.js --client redlock --urls redlock://H:P,H:P,... [--acquire N]
//                 [--handoffs N] [--reps R]
//
// handoff: two processes hand one lock back and forth. The holder keeps it
//   1..11 ms (uniform, and at least 1 ms after the other process asked),
//   then notes the time and calls release; the other process notes the time
//   its acquire resolved. process.hrtime.bigint() is CLOCK_MONOTONIC, one
//   clock for all processes (and the same clock as hilock-bench's), so the
//   parent pairs the two timestamps after the run: no Redis round trip is
//   part of the measurement. At the start of each block the holder times
//   sequential PINGs through its ioredis client: the peer's own baseline.
// herd: P processes with W waiters each on one name; each waiter holds the
//   lock --hold-us once. Commands per handoff from INFO commandstats,
//   counting only the commands the client sends itself (scripts' inner
//   calls are left out, as for hilock).
//
// With --urls (the masters of a Redlock, e.g. 5 from
// scripts/redis-many-throwaway.sh), npm's redlock runs as a Redlock: one
// ioredis client per master, new Redlock([...]); its figures are given
// beside the same redlock on ONE master (the first, Redlock([client])),
// runs alternated --reps times, medians over the repetitions (as
// hilock-bench's redlock scenarios, whose lines carry the same names):
// redlock_acquire: one process, one name, nobody else: lock(), then
//   unlock(), then a pause of 1 ms (a setTimeout(0.5) is 1 ms in node),
//   again; latency of the lock() alone. PINGs to the first master through
//   its ioredis client at the start of each run. redlock 4.2.0 decides once
//   EVERY master has answered (not at the quorum).
// redlock_handoff: the handoff above, on the N masters and on one.
//
// Both peers poll: redis-semaphore's Mutex tries SET NX PX and sleeps
// retryInterval (10 ms, its default) between tries; redlock retries after
// retryDelay, set here to 10 ms with no jitter (its defaults are 200 ms
// +-100 ms) so that all the polling clients poll alike.
'use strict';

const { fork } = require('child_process');
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');

const LEASE_MS = 30000;
// redlock's retry settings here (its defaults: retryDelay 200, retryJitter
// 100, retryCount 10): every polling client polls every 10 ms.
const REDLOCK_RETRY = { driftFactor: 0.01, retryCount: -1, retryDelay: 10, retryJitter: 0 };
const ACQ_GAP_MS = 0.5; // node makes it 1 ms
const PING_N = 300;
const BLOCKS = 3;

function args(argv) {
    const a = { client: 'redis-semaphore', handoffs: 300, herd: '', holdUs: 1000, latDir: '', acquire: 0, reps: 3 };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i], v = argv[i + 1];
        if (k === '--url') a.url = v, i++;
        else if (k === '--client') a.client = v, i++;
        else if (k === '--handoffs') a.handoffs = parseInt(v, 10), i++;
        else if (k === '--herd') a.herd = v, i++;
        else if (k === '--hold-us') a.holdUs = parseInt(v, 10), i++;
        else if (k === '--lat-dir') a.latDir = v, i++;
        else if (k === '--urls') a.urls = v, i++;
        else if (k === '--acquire') a.acquire = parseInt(v, 10), i++;
        else if (k === '--reps') a.reps = parseInt(v, 10), i++;
        else if (k === '--child') a.child = v, i++;
        else throw new Error('unknown argument ' + k);
    }
    return a;
}

const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function pct(sorted, p) {
    if (sorted.length === 0) return 0;
    let rank = Math.ceil((p / 100) * sorted.length);
    rank = Math.min(Math.max(rank, 1), sorted.length);
    return sorted[rank - 1];
}
const median = (v) => {
    const s = [...v].sort((x, y) => x - y);
    return s.length === 0 ? 0 : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const round = (x, d) => Number(x.toFixed(d));

// ---- The two peers behind one interface ----------------------------------

// "redlock://h:p,h:p" -> ['redis://h:p', ...]
function redlockUrls(urls) {
    const m = /^redlock:\/\/(.*)$/.exec(urls);
    if (!m) throw new Error('--urls wants redlock://HOST:PORT,HOST:PORT,...');
    return m[1].split(',').filter(Boolean).map((hp) => 'redis://' + hp);
}

// One ioredis client per URL (the first takes the PINGs).
function connect(urls) {
    return urls.map((u) => new Redis(u, { enableOfflineQueue: true, lazyConnect: false }));
}

// A lock client: newLock(name) -> { acquire(): Promise, release(): Promise }
// `redis` is one ioredis client, or (redlock) an array of them: its masters.
function makeClient(kind, redis) {
    if (kind === 'redis-semaphore') {
        const { Mutex } = require('redis-semaphore');
        return {
            commands: ['set', 'evalsha', 'eval'],
            newLock(name) {
                const m = new Mutex(redis, name, {
                    lockTimeout: LEASE_MS, acquireTimeout: 600000, retryInterval: 10,
                    refreshInterval: 0,
                });
                return { acquire: () => m.acquire(), release: () => m.release() };
            },
        };
    }
    if (kind === 'redlock') {
        const Redlock = require('redlock');
        const rl = new Redlock(Array.isArray(redis) ? redis : [redis], REDLOCK_RETRY);
        return {
            commands: ['evalsha', 'eval'],
            newLock(name) {
                let held = null;
                return {
                    acquire: async () => { held = await rl.lock(name, LEASE_MS); },
                    release: async () => { const l = held; held = null; await l.unlock(); },
                };
            },
        };
    }
    throw new Error('unknown client ' + kind);
}

// ---- Children --------------------------------------------------------------

async function handoffChild(a) {
    const all = connect(a.urls || [a.url]);
    const redis = all[0];
    const client = makeClient(a.client, a.urls ? all : redis);
    const lock = client.newLock(a.name);
    await Promise.all(all.map((r) => r.ping()));
    let issuedPeerAt = 0n; // when the other process asked, as told by the parent
    process.on('message', async (m) => {
        try {
            if (m.t === 'acquire') {
                process.send({ t: 'issued', at: String(now()) });
                await lock.acquire();
                const at = now();
                process.send({ t: 'acquired', at: String(at) });
            } else if (m.t === 'pings') {
                const v = [];
                for (let i = 0; i < PING_N; i++) {
                    const t0 = now();
                    await redis.ping();
                    v.push(Number(now() - t0) / 1000);
                }
                process.send({ t: 'pinged', v });
            } else if (m.t === 'hold') {
                issuedPeerAt = BigInt(m.issued);
                const holdMs = 1 + Math.random() * 10;
                await sleep(holdMs);
                while (now() - issuedPeerAt < 1000000n) await sleep(0.2);
                const at = now();
                process.send({ t: 'releasing', at: String(at) });
                await lock.release();
                process.send({ t: 'released' });
            } else if (m.t === 'release-last') {
                await lock.release();
                process.send({ t: 'released' });
            } else if (m.t === 'quit') {
                all.forEach((r) => r.disconnect());
                process.exit(0);
            }
        } catch (e) {
            process.send({ t: 'error', msg: String(e && e.stack || e) });
        }
    });
    process.send({ t: 'ready' });
}

async function herdChild(a) {
    const redis = new Redis(a.url);
    const client = makeClient(a.client, redis);
    await redis.ping();
    const events = []; // [kind, ns] kind 0 = acquired, 1 = releasing
    let done = 0;
    process.on('message', async (m) => {
        if (m.t === 'go') {
            const one = async () => {
                const lock = client.newLock(a.name);
                await lock.acquire();
                events.push([0, String(now())]);
                await sleep(a.holdUs / 1000);
                events.push([1, String(now())]);
                await lock.release();
            };
            const all = [];
            for (let i = 0; i < a.waiters; i++) all.push(one().catch((e) => process.send({ t: 'error', msg: String(e) })));
            await Promise.all(all);
            done = 1;
            process.send({ t: 'done', events });
        } else if (m.t === 'quit') {
            redis.disconnect();
            process.exit(done ? 0 : 1);
        }
    });
    process.send({ t: 'ready' });
}

// ---- Parent ----------------------------------------------------------------

function spawn(a, childArgs) {
    return fork(__filename, ['--child', JSON.stringify(childArgs)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

function waitFor(child, type, timeoutMs) {
    return new Promise((resolve, reject) => {
        const to = setTimeout(() => reject(new Error('timeout waiting for ' + type)), timeoutMs);
        const on = (m) => {
            if (m.t === 'error') { clearTimeout(to); child.off('message', on); reject(new Error(m.msg)); }
            if (m.t === type) { clearTimeout(to); child.off('message', on); resolve(m); }
        };
        child.on('message', on);
    });
}

// Two processes hand `name` over a.handoffs times, on a.url or (redlock)
// on the masters `urls`. Returns the figures, the sorted latencies and
// the error count.
async function handoffRun(a, name, urls) {
    const kids = [0, 1].map(() => spawn(a, { url: a.url, urls, client: a.client, name, role: 'handoff' }));
    await Promise.all(kids.map((k) => waitFor(k, 'ready', 15000)));
    const rel = [], acq = [], pingBlocks = [];
    const block = Math.max(1, Math.floor(a.handoffs / BLOCKS));
    let holder = 0, errors = 0;
    try {
        // The first acquisition is not a handoff.
        let p = waitFor(kids[0], 'acquired', 10000);
        kids[0].send({ t: 'acquire' });
        await p;
        for (let k = 0; k < a.handoffs; k++) {
            const h = kids[holder], w = kids[1 - holder];
            if (k % block === 0 && pingBlocks.length < BLOCKS) {
                const pp = waitFor(h, 'pinged', 30000);
                h.send({ t: 'pings' });
                pingBlocks.push((await pp).v);
            }
            const issued = waitFor(w, 'issued', 10000);
            const acquired = waitFor(w, 'acquired', 30000);
            const releasing = waitFor(h, 'releasing', 30000);
            const released = waitFor(h, 'released', 30000);
            w.send({ t: 'acquire' });
            const is = await issued;
            h.send({ t: 'hold', issued: is.at });
            rel.push(BigInt((await releasing).at));
            acq.push(BigInt((await acquired).at));
            await released;
            holder = 1 - holder;
        }
        const last = waitFor(kids[holder], 'released', 10000);
        kids[holder].send({ t: 'release-last' });
        await last;
    } catch (e) {
        process.stderr.write(`peers: handoff with ${a.client}: ${e.message}\n`);
        errors++;
    }
    kids.forEach((k) => k.send({ t: 'quit' }));
    const lat = rel.map((r, i) => Number(acq[i] - r) / 1000).filter((x) => !Number.isNaN(x));
    // Per block p50, median over blocks; p90/p99 pooled (as hilock-bench).
    const p50s = [], ping50s = [];
    for (let b = 0; b < pingBlocks.length; b++) {
        const part = lat.slice(b * block, b + 1 === pingBlocks.length ? lat.length : (b + 1) * block).sort((x, y) => x - y);
        if (part.length) p50s.push(pct(part, 50));
        ping50s.push(pct([...pingBlocks[b]].sort((x, y) => x - y), 50));
    }
    const sorted = [...lat].sort((x, y) => x - y);
    return { p50: median(p50s), ping: median(ping50s), sorted, blocks: p50s.length, errors };
}

async function handoff(a) {
    const name = `hb-peer-handoff:${a.client}:${process.pid}`;
    const { p50, ping, sorted, blocks, errors } = await handoffRun(a, name, null);
    print({
        scenario: 'handoff', client: a.client,
        p50_us: round(p50, 1), p99_us: round(pct(sorted, 99), 1), ping_rtt_p50_us: round(ping, 1),
        p50_over_ping: round(ping > 0 ? p50 / ping : 0, 2), handoffs: sorted.length,
        p90_us: round(pct(sorted, 90), 1), max_us: round(sorted.length ? sorted[sorted.length - 1] : 0, 1),
        ping_client: 'ioredis', blocks, hold_ms: '1..11 uniform',
        retry_ms: 10, errors,
    });
    if (a.latDir && sorted.length) {
        const f = path.join(a.latDir, `handoff-${a.client}.dat`);
        const lines = [`# handoff latency (us) and cumulative fraction, client ${a.client}`];
        sorted.forEach((x, i) => lines.push(`${x.toFixed(1)} ${((i + 1) / sorted.length).toFixed(6)}`));
        fs.writeFileSync(f, lines.join('\n') + '\n');
    }
    return errors;
}

async function cmdstats(redis) {
    const info = await redis.info('commandstats');
    const m = {};
    for (const line of info.split('\n')) {
        const r = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (r) m[r[1]] = Number(r[2]);
    }
    return m;
}

async function herd(a, procs, waiters) {
    const name = `hb-peer-herd:${a.client}:${process.pid}:${procs}:${waiters}`;
    const side = new Redis(a.url);
    const commands = makeClient(a.client, side).commands;
    const kids = [];
    for (let i = 0; i < procs; i++)
        kids.push(spawn(a, { url: a.url, client: a.client, name, role: 'herd', waiters, holdUs: a.holdUs }));
    let errors = 0, events = [], secs = 0, before = {}, after = {};
    try {
        await Promise.all(kids.map((k) => waitFor(k, 'ready', 15000)));
        before = await cmdstats(side);
        const t0 = now();
        const done = kids.map((k) => waitFor(k, 'done', 120000));
        kids.forEach((k) => k.send({ t: 'go' }));
        for (const d of await Promise.all(done)) events = events.concat(d.events);
        secs = Number(now() - t0) / 1e9;
        after = await cmdstats(side);
    } catch (e) {
        process.stderr.write(`peers: herd with ${a.client}: ${e.message}\n`);
        errors++;
    }
    kids.forEach((k) => k.send({ t: 'quit' }));
    side.disconnect();
    // Sorted by time, the events alternate acquired, releasing, acquired...
    events = events.map(([k, t]) => [k, BigInt(t)]).sort((x, y) => (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0));
    const lat = [];
    let overlaps = 0;
    for (let i = 0; i < events.length; i++) {
        if (events[i][0] !== (i % 2 === 0 ? 0 : 1)) overlaps++;
        if (i >= 2 && i % 2 === 0 && events[i - 1][0] === 1) lat.push(Number(events[i][1] - events[i - 1][1]) / 1000);
    }
    lat.sort((x, y) => x - y);
    const acquisitions = events.filter((e) => e[0] === 0).length;
    const handoffs = Math.max(acquisitions - 1, 0);
    const delta = (names) => names.reduce((s, n) => s + (after[n] || 0) - (before[n] || 0), 0);
    const all = Object.keys(after).filter((n) => n !== 'info').reduce((s, n) => s + after[n] - (before[n] || 0), 0);
    if (acquisitions !== procs * waiters) errors++;
    print({
        scenario: 'herd', client: a.client, processes: procs, waiters, handoffs,
        commands_per_handoff: round(handoffs ? delta(commands) / handoffs : 0, 2),
        redis_calls_per_handoff: round(handoffs ? all / handoffs : 0, 2),
        target_commands_per_handoff: procs + 2,
        p50_us: round(pct(lat, 50), 1), p99_us: round(pct(lat, 99), 1),
        hold_us: a.holdUs, seconds: round(secs, 2), overlaps, retry_ms: 10, errors,
    });
    return errors + overlaps;
}

// ---- Redlock: N masters beside one ---------------------------------------------

function redlockRetry() {
    return { retry_delay_ms: REDLOCK_RETRY.retryDelay, retry_jitter_ms: REDLOCK_RETRY.retryJitter,
        retry_count: REDLOCK_RETRY.retryCount, drift_factor: REDLOCK_RETRY.driftFactor };
}

// One run of uncontended lock() + unlock() cycles on `urls`.
async function acquireRun(a, name, urls) {
    const all = connect(urls);
    const client = makeClient('redlock', all);
    const lock = client.newLock(name);
    const acq = [], ping = [];
    let errors = 0;
    try {
        await Promise.all(all.map((r) => r.ping()));
        await lock.acquire(); // warm-up: scripts, connections
        await lock.release();
        for (let i = 0; i < PING_N; i++) {
            const t0 = now();
            await all[0].ping();
            ping.push(Number(now() - t0) / 1000);
        }
        for (let i = 0; i < a.acquire; i++) {
            const t0 = now();
            await lock.acquire();
            acq.push(Number(now() - t0) / 1000);
            await lock.release();
            await sleep(ACQ_GAP_MS);
        }
    } catch (e) {
        process.stderr.write(`peers: redlock acquire on ${urls.length}: ${e.message}\n`);
        errors++;
    }
    all.forEach((r) => r.disconnect());
    acq.sort((x, y) => x - y);
    ping.sort((x, y) => x - y);
    return { p50: pct(acq, 50), p99: pct(acq, 99), ping: pct(ping, 50), n: acq.length, errors };
}

async function redlockScenarios(a) {
    const many = redlockUrls(a.urls), one = [many[0]];
    let bad = 0;
    if (a.acquire > 0) {
        const name = `hb-peer-rlacq:${process.pid}`;
        const o = [], m = [], ratio = [], ratio99 = [];
        let cycles = 0, errors = 0;
        for (let r = 0; r < a.reps; r++) {
            const x = await acquireRun(a, name, one), y = await acquireRun(a, name, many);
            errors += x.errors + y.errors;
            cycles += y.n;
            o.push(x), m.push(y);
            if (x.p50 > 0) ratio.push(y.p50 / x.p50), ratio99.push(y.p99 / x.p99);
        }
        const med = (v, k) => median(v.map((x) => x[k]));
        print({
            scenario: 'redlock_acquire', client: 'redlock', masters: many.length,
            quorum: Math.floor(many.length / 2) + 1,
            p50_us: round(med(m, 'p50'), 1), p99_us: round(med(m, 'p99'), 1),
            one_master_p50_us: round(med(o, 'p50'), 1), one_master_p99_us: round(med(o, 'p99'), 1),
            p50_over_one_master: round(median(ratio), 2), p99_over_one_master: round(median(ratio99), 2),
            ping_rtt_p50_us: round(med(o, 'ping'), 1), ping_client: 'ioredis',
            cycles, reps: m.length, gap_ms: 1, decides: 'when every master answered',
            ...redlockRetry(), errors,
        });
        bad += errors;
    }
    if (a.handoffs > 0) {
        const name = `hb-peer-rlhandoff:${process.pid}`;
        const o = [], m = [], ratio = [];
        let handoffs = 0, errors = 0;
        for (let r = 0; r < a.reps; r++) {
            const x = await handoffRun(a, name, one), y = await handoffRun(a, name, many);
            errors += x.errors + y.errors;
            handoffs += y.sorted.length;
            const p99 = (h) => pct(h.sorted, 99);
            o.push({ p50: x.p50, p99: p99(x), ping: x.ping });
            m.push({ p50: y.p50, p99: p99(y), ping: y.ping });
            if (x.p50 > 0) ratio.push(y.p50 / x.p50);
        }
        const med = (v, k) => median(v.map((x) => x[k]));
        print({
            scenario: 'redlock_handoff', client: 'redlock', masters: many.length,
            quorum: Math.floor(many.length / 2) + 1,
            p50_us: round(med(m, 'p50'), 1), p99_us: round(med(m, 'p99'), 1),
            one_master_p50_us: round(med(o, 'p50'), 1), one_master_p99_us: round(med(o, 'p99'), 1),
            p50_over_one_master: round(median(ratio), 2),
            ping_rtt_p50_us: round(med(m, 'ping'), 1), one_master_ping_rtt_p50_us: round(med(o, 'ping'), 1),
            ping_client: 'ioredis', handoffs, reps: m.length, hold_ms: '1..11 uniform',
            ...redlockRetry(), errors,
        });
        bad += errors;
    }
    // What the runs left: lock keys are gone (unlocked); nothing else is written.
    return bad;
}

function print(o) {
    process.stdout.write(JSON.stringify(o) + '\n');
}

async function main() {
    const a = args(process.argv.slice(2));
    if (a.child) {
        const c = JSON.parse(a.child);
        return c.role === 'handoff' ? handoffChild(c) : herdChild(c);
    }
    if (a.urls) {
        if (a.client !== 'redlock') throw new Error('--urls is for --client redlock');
        process.exitCode = (await redlockScenarios(a)) ? 1 : 0;
        return;
    }
    if (!a.url) throw new Error('--url is required');
    let bad = 0;
    if (a.handoffs > 0) bad += await handoff(a);
    for (const pw of a.herd.split(',').filter(Boolean)) {
        const [p, w] = pw.split(':').map((x) => parseInt(x, 10));
        bad += await herd(a, p, w);
    }
    process.exitCode = bad ? 1 : 0;
}

main().catch((e) => {
    process.stderr.write(`peers: ${e.stack || e}\n`);
    process.exit(1);
});
