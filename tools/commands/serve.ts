/**
 * `vouch serve [--config FILE]`: the gateway (DESIGN 3-6), stopped cleanly
 * by SIGINT, SIGTERM, SIGHUP, or (run by npm) its parent's exit, so that
 * stopping `npm start` never leaves a gateway holding the port.
 */
import { progressReporter, type Command } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';

export const serve: Command = {
  name: 'serve',
  usage: '[--config FILE]',
  summary: 'Runs the gateway: JSON lookups, verified downloads and (with an authority key) submit.',
  details: [
    'Without --config it runs the embedded default: listens on 127.0.0.1:8080, chain in ./var/chain,',
    'a development authority key and submit token created on first start (mode 0600) and printed once.',
    'A --config file stands on its own: it is not merged with the embedded default. Keys it leaves out',
    'take their defaults, but without an authority section the gateway is read-only (no submit), and',
    'relative paths are relative to the file. The gateway prints the mode and the chain directory at start.',
    'Stops cleanly on SIGINT, SIGTERM or SIGHUP; run by npm (npm start, npx), also when npm exits.',
  ].join('\n'),
  options: { config: { type: 'string', value: 'FILE', help: 'YAML configuration file (its keys: docs/guide/configuration.md)' } },
  noResultOptions: true,
  async run(v) {
    // Loaded here so the other commands do not pay for the gateway's modules.
    const { defaultConfig, loadConfigFile } = await import('../../gateway/config.ts');
    const { startGateway } = await import('../../gateway/gateway.ts');
    const config = v.config ? loadConfigFile(v.config) : defaultConfig();
    const bar = progressReporter('verifying the chain');
    const gw = await startGateway(config, { embeddedDefault: !v.config, onProgress: bar.update });
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      gw.ctx.log.info('stopping', { signal });
      gw.close().then(() => process.exit(0), () => process.exit(0));
      setTimeout(() => process.exit(0), 12_000).unref();
    };
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => stop(signal));
    // Run by npm (`npm start`, `npx vouch serve`): npm forwards SIGINT and SIGTERM, but a shell between
    // it and us may not, and a killed npm forwards nothing. Stop when the process that started us is gone.
    if (process.env.npm_lifecycle_event !== undefined) {
      const parent = process.ppid;
      setInterval(() => { if (process.ppid !== parent) stop('parent exited'); }, 500).unref();
    }
    try {
      await gw.ready.finally(() => bar.done());
    } catch (e) {
      await gw.close().catch(() => {});
      if (e instanceof VouchError && e.kind === 'integrity') {
        gw.ctx.log.error('the chain does not verify; refusing to serve', { code: e.code, index: e.index ?? null, message: e.message, ...(e.evidence ?? {}) });
      }
      throw e;
    }
    await new Promise<void>(() => {});
    return 0;
  },
};
