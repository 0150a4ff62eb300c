/**
 * The wrk side of `npm run bench -- soak`: a Lua script that picks the kind
 * of each request by weight (lookup / hot download / cold download) and
 * counts the statuses of the answers in `response()`, and a runner that
 * reports them (without failing on unexpected statuses: they are a figure).
 * Loopback only.
 */
import { execFile } from 'node:child_process';
import { assertLoopback, parseWrk, type WrkResult } from './gateway-harness.ts';

export interface MixScript {
  lookups: string[];
  hot: string[];
  /** Rotated: thread k of n starts at offset + k·len/n. */
  cold: string[];
  /** Weights of lookups, hot and cold downloads; they need not sum to 1. */
  weights: { lookup: number; hot: number; cold: number };
}

const safe = (p: string) => {
  if (!/^\/[A-Za-z0-9%._~/?=&-]*$/.test(p)) throw new Error(`bench: path not safe for the wrk script: ${p}`);
  return `  "${p}",`;
};

/**
 * The Lua script. Arguments after `--`: the cold rotation offset and the
 * number of threads. `done()` prints `issued KIND N`, `status CLASS STATUS N`
 * (CLASS: `json` when the answer's Content-Type is JSON, `bytes` for another
 * 200, `other` otherwise), `errors ...` and `next-offset N`.
 */
export function mixScript(m: MixScript): string {
  const total = m.weights.lookup + m.weights.hot + m.weights.cold;
  const wl = m.weights.lookup / total;
  const wh = (m.weights.lookup + m.weights.hot) / total;
  return [
    'local lookups = {',
    ...m.lookups.map(safe),
    '}',
    'local hot = {',
    ...m.hot.map(safe),
    '}',
    'local cold = {',
    ...m.cold.map(safe),
    '}',
    `local WL, WH = ${wl}, ${wh}`,
    'local threads = {}',
    'local nsetup = 0',
    'function setup(thread)',
    '  nsetup = nsetup + 1',
    '  thread:set("tid", nsetup)',
    '  table.insert(threads, thread)',
    'end',
    'issued = { lookup = 0, hot = 0, cold = 0 }',
    'statuses = {}',
    'cn = 0',
    'local lr, hr, cr = {}, {}, {}',
    '-- wrk sets the Host header just before init(): format the requests here, not at load time.',
    'function init(args)',
    '  local base = tonumber(args[1] or "0")',
    '  local nt = tonumber(args[2] or "1")',
    '  for i, p in ipairs(lookups) do lr[i] = wrk.format("GET", p) end',
    '  for i, p in ipairs(hot) do hr[i] = wrk.format("GET", p) end',
    '  for i, p in ipairs(cold) do cr[i] = wrk.format("GET", p) end',
    '  cn = base + math.floor((tid - 1) * #cold / nt)',
    '  math.randomseed(1000 * base + tid)',
    'end',
    'function request()',
    '  local x = math.random()',
    '  if x < WL then',
    '    issued.lookup = issued.lookup + 1',
    '    return lr[math.random(#lr)]',
    '  elseif x < WH then',
    '    issued.hot = issued.hot + 1',
    '    return hr[math.random(#hr)]',
    '  end',
    '  issued.cold = issued.cold + 1',
    '  local r = cr[(cn % #cr) + 1]',
    '  cn = cn + 1',
    '  return r',
    'end',
    'function response(status, headers, body)',
    '  local ct = headers["content-type"] or headers["Content-Type"] or ""',
    '  local class = "other"',
    '  if string.find(ct, "json", 1, true) then class = "json" elseif status == 200 then class = "bytes" end',
    '  local k = class .. " " .. status',
    '  statuses[k] = (statuses[k] or 0) + 1',
    'end',
    'function done(summary, latency, requests)',
    '  local iss, st, nxt = {}, {}, 0',
    '  for _, t in ipairs(threads) do',
    '    for k, v in pairs(t:get("issued")) do iss[k] = (iss[k] or 0) + v end',
    '    for k, v in pairs(t:get("statuses")) do st[k] = (st[k] or 0) + v end',
    '    local c = t:get("cn")',
    '    if c > nxt then nxt = c end',
    '  end',
    '  for k, v in pairs(iss) do io.write(string.format("issued %s %d\\n", k, v)) end',
    '  for k, v in pairs(st) do io.write(string.format("status %s %d\\n", k, v)) end',
    '  local e = summary.errors',
    '  io.write(string.format("errors connect %d read %d write %d status %d timeout %d\\n", e.connect, e.read, e.write, e.status, e.timeout))',
    '  io.write(string.format("next-offset: %d\\n", nxt))',
    'end',
    '',
  ].join('\n');
}

export interface MixResult extends WrkResult {
  issued: Record<string, number>;
  /** `CLASS STATUS` → answers. */
  statuses: Record<string, number>;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  /** wrk's own output, for the log. */
  text: string;
}

export function runMix(
  url: string,
  o: { threads: number; connections: number; seconds: number; script: string; offset: number; timeoutS: number },
): Promise<MixResult> {
  assertLoopback(url);
  const args = [
    '-t',
    String(o.threads),
    '-c',
    String(o.connections),
    '-d',
    `${o.seconds}s`,
    '--latency',
    '--timeout',
    `${o.timeoutS}s`,
    '-s',
    o.script,
    url,
    '--',
    String(o.offset),
    String(o.threads),
  ];
  return new Promise((resolve, reject) => {
    execFile('wrk', args, { encoding: 'utf8', timeout: (o.seconds + 60) * 1000, maxBuffer: 16 * 1024 * 1024 }, (e, stdout, stderr) => {
      if (e) return reject(new Error(`wrk failed: ${e.message}\n${stdout}\n${stderr}`));
      try {
        // wrk pads a latency in seconds ("2.07s "): parseWrk's percentile patterns want the line to end there.
        const base = parseWrk(stdout.replace(/[ \t]+$/gm, ''));
        const issued: Record<string, number> = {};
        const statuses: Record<string, number> = {};
        for (const m of stdout.matchAll(/^issued (\w+) (\d+)$/gm)) issued[m[1]!] = Number(m[2]);
        for (const m of stdout.matchAll(/^status (\w+ \d+) (\d+)$/gm)) statuses[m[1]!] = Number(m[2]);
        const er = /^errors connect (\d+) read (\d+) write (\d+) status (\d+) timeout (\d+)$/m.exec(stdout);
        if (!er) throw new Error(`bench: wrk script printed no errors line:\n${stdout}\n${stderr}`);
        const [connect, read, write, status, timeout] = er.slice(1).map(Number) as [number, number, number, number, number];
        resolve({ ...base, issued, statuses, errors: { connect, read, write, status, timeout }, text: stdout });
      } catch (err) {
        reject(err);
      }
    });
  });
}
