/**
 * Fleet bench (issue 35; `npm run bench -- fleet [--quick]`): an authority
 * pushing to git http-backend and two mirrors, all real processes on
 * 127.0.0.1. Measures (1) the time from a submit's 201 until both mirrors
 * answer its lookup 200, with mirrors syncing every second on their own and
 * with sync hints (authority.notify, mirrors at a 300 s interval); (2)
 * lookups through HAProxy (deploy/fleet/haproxy.cfg) over the two mirrors
 * against one mirror asked directly (wrk), as the balancer's overhead on one
 * machine. Each stage of the hinted path is timed from the git server's
 * side (VOUCH_FLEET_TRACE=1 prints every round). Figures go to
 * bench/RESULTS.md under <!-- bench:fleet -->.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { OriginServer } from '../test/helpers/origin-server.ts';
import { PushingAuthority, type GatewayProcess } from '../test/helpers/gateway-process.ts';
import { freePort } from '../test/helpers/free-port.ts';
import { HAPROXY, ensureWrk, median, root, rotationScript, sleep, wrk } from './gateway-harness.ts';

export async function runFleetBench(quick: boolean): Promise<{ title: string; markdown: string }> {
  const work = mkdtempSync(join(tmpdir(), 'vouch-fleet-bench-'));
  const token = 'fleet-bench-token-' + 'b'.repeat(24);
  const syncToken = 'fleet-bench-sync-' + 's'.repeat(24);
  const syncTokenFile = join(work, 'sync.token');
  writeFileSync(syncTokenFile, syncToken, { mode: 0o600 });
  const origin = await OriginServer.start();
  const live = await PushingAuthority.start(work, { signer: 'fleet-bench', token });
  let haproxy: ChildProcess | null = null;
  let n = 0;
  const rounds = quick ? 5 : 21;
  const lines: string[] = [];
  const load0 = loadavg()
    .map((x) => x.toFixed(1))
    .join(' / ');
  try {
    const submit = async () => {
      const path = `/b-${++n}.tgz`;
      origin.route(path, { body: `fleet bench ${n}` });
      const r = await fetch(`${live.authority.url}/v1/submit`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url: origin.url(path), name: 'acme/bench', semver: `1.0.${n}`, license: 'MIT' }),
      });
      await r.text();
      if (r.status !== 201) throw new Error(`bench: submit answered ${r.status}`);
      return `/v1/endorsement?url=${encodeURIComponent(origin.url(path))}`;
    };
    const localHead = () => spawnSync('git', ['-C', live.chainDir, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
    const bareHead = () => {
      try {
        return readFileSync(join(live.bareDir, 'refs', 'heads', 'main'), 'utf8').trim();
      } catch {
        return '';
      }
    };
    const pushMs: number[] = [];
    /** Per round: each stage's end, ms after the 201 (git requests from the git server's timeline). */
    const stages: Record<string, number>[] = [];
    const git = live.gitServer;
    git.timeline = [];
    /** ms from the 201 until every mirror answers the lookup 200 (polled every 5 ms, no min-size header); the push time goes to pushMs. */
    const latency = async (mirrors: GatewayProcess[]): Promise<number> => {
      const tSubmit = performance.now();
      const from = git.timeline!.length;
      const path = await submit();
      const t0 = performance.now();
      const answered: number[] = [];
      const head = localHead();
      const pushed = (async () => {
        while (bareHead() !== head && performance.now() - t0 < 30_000) await sleep(5);
        pushMs.push(performance.now() - t0);
      })();
      await Promise.all(
        mirrors.map(async (m) => {
          for (;;) {
            const r = await fetch(m.url + path);
            await r.arrayBuffer();
            if (r.status === 200) {
              answered.push(performance.now() - t0);
              return;
            }
            if (performance.now() - t0 > 30_000) throw new Error('bench: a mirror did not answer in 30 s');
            await sleep(5);
          }
        }),
      );
      const ms = performance.now() - t0;
      await pushed;
      const row: Record<string, number> = { submit: t0 - tSubmit };
      const last = (re: RegExp, at: 'start' | 'end') => {
        const xs = git.timeline!.slice(from).filter((e) => re.test(e.request));
        return xs.length === 0 ? Number.NaN : Math.max(...xs.map((e) => e[at] - t0));
      };
      row.refsPushEnd = last(/GET .*service=git-receive-pack/, 'end');
      row.receivePackStart = last(/POST .*git-receive-pack/, 'start');
      row.receivePackEnd = last(/POST .*git-receive-pack/, 'end');
      const firstUp = git.timeline!.slice(from).filter((e) => /upload-pack/.test(e.request));
      row.fetchStart = firstUp.length === 0 ? Number.NaN : Math.min(...firstUp.map((e) => e.start - t0));
      row.fetchEnd = last(/POST .*git-upload-pack/, 'end');
      row.firstAnswer = Math.min(...answered);
      row.allAnswer = ms;
      stages.push(row);
      if (process.env.VOUCH_FLEET_TRACE)
        console.error(
          git
            .timeline!.slice(from)
            .map((e) => `${(e.start - t0).toFixed(0)}..${(e.lastByte - t0).toFixed(0)}..${(e.end - t0).toFixed(0)} ${e.request.replace(/^.*\.git\//, '')}`)
            .join('; '),
          `answered ${answered.map((x) => x.toFixed(0)).join(',')}`,
        );
      return ms;
    };
    const measure = async (mirrors: GatewayProcess[]) => {
      await latency(mirrors); // warm-up
      pushMs.length = 0;
      stages.length = 0;
      const xs: number[] = [];
      for (let i = 0; i < rounds; i++) {
        xs.push(await latency(mirrors));
        await sleep(200 + Math.random() * 800); // not in step with the 1 s interval
      }
      const stage = (k: string) => median(stages.map((r) => r[k]!).filter((x) => Number.isFinite(x)));
      const keys = Object.keys(stages[0] ?? {});
      return { median: median(xs), max: Math.max(...xs), push: median(pushMs), stages: Object.fromEntries(keys.map((k) => [k, stage(k)])) };
    };

    // 1a. Polling mirrors (sync_interval 1 s), no hints (VOUCH_FLEET_HINTS_ONLY=1: skipped, with the balancer rows, for A/B runs of the hinted path).
    const hintsOnly = process.env.VOUCH_FLEET_HINTS_ONLY === '1';
    const polling = hintsOnly
      ? []
      : [await live.startMirror(join(work, 'p1'), { syncInterval: 1 }), await live.startMirror(join(work, 'p2'), { syncInterval: 1 })];
    const plain = hintsOnly ? { median: Number.NaN, max: Number.NaN, push: Number.NaN, stages: {} as Record<string, number> } : await measure(polling);
    for (const m of polling) await m.stop();
    // 1b. Hinted mirrors (a 300 s interval: every sync is the authority's hint).
    const hintedMirror = (d: string) =>
      live.startMirror(join(work, d), {
        more: { chain: { dir: join(work, d, 'chain'), remote: live.remote, public_key: live.pub, sync_interval: 300, sync_token_file: syncTokenFile } },
      });
    const hinted = [await hintedMirror('h1'), await hintedMirror('h2')];
    await live.restart({ notify: hinted.map((m) => ({ url: m.url, token_file: syncTokenFile })) });
    const notified = await measure(hinted);
    if (process.env.VOUCH_FLEET_TRACE)
      for (const m of hinted)
        console.error(
          m
            .stderr()
            .split('\n')
            .filter((l) => l.includes('accepted the remote head'))
            .map((l) => JSON.stringify((JSON.parse(l) as { ms?: unknown }).ms))
            .join(' '),
        );
    console.error('fleet bench stages (ms after the 201, medians): polling', JSON.stringify(plain.stages), 'hinted', JSON.stringify(notified.stages));
    lines.push(
      '| sync latency, submit 201 → both of 2 mirrors answer 200 | median | max | of which 201 → pushed (median) |',
      '| --- | ---: | ---: | ---: |',
      `| mirrors polling (sync_interval 1 s), no hints | ${plain.median.toFixed(0)} ms | ${plain.max.toFixed(0)} ms | ${plain.push.toFixed(0)} ms |`,
      `| sync hints (authority.notify → POST /v1/sync), sync_interval 300 s | ${notified.median.toFixed(0)} ms | ${notified.max.toFixed(0)} ms | ${notified.push.toFixed(0)} ms |`,
      '',
      `${rounds} submits each (after one warm-up), lookups polled every 5 ms on both mirrors; target with hints: ≤ 200 ms median. ` +
        `Load average when the run started: ${load0} (${spawnSync('nproc', { encoding: 'utf8' }).stdout.trim()} cores): on a shared, busy machine every git http-backend request and every process waits for a core.`,
    );
    const at = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '—' : `${x.toFixed(0)} ms`);
    const stageRow = (what: string, k: string) => `| ${what} | ${at(plain.stages[k])} | ${at(notified.stages[k])} |`;
    lines.push(
      '',
      "| where the time goes (ms after the 201, median of each stage's end; git requests as the git server saw them) | polling | hints |",
      '| --- | ---: | ---: |',
      stageRow('the push read the remote refs (GET info/refs; — : none, a push after our own goes straight to the POST)', 'refsPushEnd'),
      stageRow('the push sent (POST git-receive-pack starts)', 'receivePackStart'),
      stageRow("the git host's answer ended (receive-pack done, its hooks included)", 'receivePackEnd'),
      stageRow("a mirror's first fetch request starts", 'fetchStart'),
      stageRow("the mirrors' last POST git-upload-pack answered", 'fetchEnd'),
      stageRow('the first mirror answers 200 (verified, stored, state swapped)', 'firstAnswer'),
      stageRow('both mirrors answer 200', 'allAnswer'),
      '',
      `The submit itself (request → 201) took ${at(notified.stages.submit)} (median, hints run). The push starts while the 201 is on its way; the polling mirrors fetch on their own clock, so their rows are not a sequence.`,
    );

    // 2. Lookups through HAProxy over both mirrors vs one mirror directly.
    if (hintsOnly) {
      lines.push('', 'VOUCH_FLEET_HINTS_ONLY=1: the balancer rows were not measured.');
    } else if (HAPROXY === null) {
      lines.push('', 'HAProxy is not installed (apt-get install haproxy): the balancer rows were not measured.');
    } else {
      ensureWrk();
      const paths: string[] = [];
      for (let i = 0; i < 20; i++) paths.push(await submit());
      await sleep(1500);
      const lbPort = await freePort();
      const cfg = readFileSync(join(root, 'deploy', 'fleet', 'haproxy.cfg'), 'utf8')
        .replace('127.0.0.1:8080', `127.0.0.1:${lbPort}`)
        .replace('127.0.0.1:8081', new URL(hinted[0]!.url).host)
        .replace('127.0.0.1:8082', new URL(hinted[1]!.url).host);
      writeFileSync(join(work, 'haproxy.cfg'), cfg);
      haproxy = spawn(HAPROXY, ['-db', '-f', join(work, 'haproxy.cfg')], { stdio: 'ignore' });
      const lb = `http://127.0.0.1:${lbPort}`;
      for (let i = 0; i < 100; i++) {
        const r = await fetch(`${lb}/readyz`).catch(() => null);
        if (r?.status === 200) break;
        await sleep(100);
      }
      await sleep(2500);
      const script = join(work, 'paths.lua');
      writeFileSync(script, rotationScript(paths));
      const seconds = quick ? 3 : 8;
      const direct: number[] = [];
      const balanced: number[] = [];
      const p50d: number[] = [];
      const p50b: number[] = [];
      for (let r = 0; r < (quick ? 1 : 3); r++) {
        const d = await wrk(hinted[0]!.url, { threads: 2, connections: 32, seconds, script });
        const b = await wrk(lb, { threads: 2, connections: 32, seconds, script });
        direct.push(d.rps);
        p50d.push(d.p50Ms);
        balanced.push(b.rps);
        p50b.push(b.p50Ms);
      }
      lines.push(
        '',
        '| lookups (wrk -t2 -c32, 20 URLs in rotation) | requests/s (median) | p50 |',
        '| --- | ---: | ---: |',
        `| 1 mirror, direct | ${median(direct).toFixed(0)} | ${median(p50d).toFixed(2)} ms |`,
        `| HAProxy (deploy/fleet/haproxy.cfg) over 2 mirrors | ${median(balanced).toFixed(0)} | ${median(p50b).toFixed(2)} ms |`,
        '',
        `Ratio HAProxy over 2 / 1 direct: ${(median(balanced) / median(direct)).toFixed(2)}×. All of it on one machine of ${spawnSync('nproc', { encoding: 'utf8' }).stdout.trim()} cores: ` +
          "the two mirrors, HAProxy and wrk share the same cores, so the ratio is the balancer's overhead here, not the scaling of two machines.",
      );
    }
    for (const m of hinted) await m.stop();
  } finally {
    haproxy?.kill('SIGTERM');
    await live.stop();
    await origin.close();
    rmSync(work, { recursive: true, force: true });
  }
  return { title: 'Mirror fleets: sync latency and the balancer', markdown: lines.join('\n') };
}
