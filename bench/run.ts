/**
 * Benchmark runner: `npm run bench -- NAME [--quick]`. Each benchmark prints
 * its figures and rewrites its own section of bench/RESULTS.md, with the
 * machine it ran on. Figures are medians of several runs, as ratios against
 * a baseline run side by side where the target is a ratio.
 */
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';

const BENCHES: Record<string, () => Promise<{ title: string; markdown: string }>> = {
  chain: async () => (await import('./chain-bench.ts')).runChainBench(process.argv.includes('--quick')),
  gateway: async () => (await import('./gateway-bench.ts')).runGatewayBench(process.argv.includes('--quick')),
  mirror: async () => (await import('./mirror-bench.ts')).runMirrorBench(process.argv.includes('--quick')),
  ecosystem: async () => (await import('./ecosystem-bench.ts')).runEcosystemBench(process.argv.includes('--quick')),
  maven: async () => (await import('./maven-bench.ts')).runMavenBench(process.argv.includes('--quick')),
  soak: async () => (await import('./soak-bench.ts')).runSoakBench(process.argv.includes('--quick')),
  memory: async () => (await import('./memory-bench.ts')).runMemoryBench(process.argv.includes('--quick')),
  scale: async () => (await import('./scale-bench.ts')).runScaleBench(process.argv.includes('--quick')),
  proofs: async () => (await import('./proofs-bench.ts')).runProofsBench(process.argv.includes('--quick')),
  keys: async () => (await import('./keys-bench.ts')).runKeysBench(process.argv.includes('--quick')),
  endorse: async () => (await import('./endorse-bench.ts')).runEndorseBench(process.argv.includes('--quick')),
  tlog: async () => (await import('./tlog-bench.ts')).runTlogBench(process.argv.includes('--quick')),
  oci: async () => (await import('./oci-bench.ts')).runOciBench(process.argv.includes('--quick')),
  fleet: async () => (await import('./fleet-bench.ts')).runFleetBench(process.argv.includes('--quick')),
  index: async () => (await import('./index-bench.ts')).runIndexBench(process.argv.includes('--quick')),
  git: async () => (await import('./git-bench.ts')).runGitBench(process.argv.includes('--quick')),
  gitops: async () => (await import('./gitops-bench.ts')).runGitopsBench(process.argv.includes('--quick')),
};

const name = process.argv[2];
const bench = name ? BENCHES[name] : undefined;
if (!bench) {
  console.error(`usage: npm run bench -- <${Object.keys(BENCHES).join('|')}> [--quick]`);
  process.exit(2);
}

const { title, markdown, key: sectionKey } = (await bench()) as { title: string; markdown: string; key?: string };
// A bench run in another mode (scale --layout=sparse) keeps its own section.
const key = sectionKey ?? name;
const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB RAM, Node ${process.version}, ${process.platform}/${process.arch}`;
const section = `<!-- bench:${key} -->\n## ${title}\n\nRun: \`npm run bench -- ${name}\` on ${new Date().toISOString().slice(0, 10)}; machine: ${machine}.\n\n${markdown.trim()}\n<!-- /bench:${key} -->`;
const path = fileURLToPath(new URL('./RESULTS.md', import.meta.url));
let doc = existsSync(path)
  ? readFileSync(path, 'utf8')
  : '# Benchmark results\n\nWritten by `npm run bench -- NAME`; each section is replaced by its latest run.\n';
const re = new RegExp(`<!-- bench:${key} -->[\\s\\S]*?<!-- /bench:${key} -->`);
doc = re.test(doc) ? doc.replace(re, section) : doc.trimEnd() + '\n\n' + section + '\n';
if (!process.argv.includes('--quick')) writeFileSync(path, doc);
console.log('\n' + section);
