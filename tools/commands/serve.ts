/**
 * `vouch serve [--config FILE] [--dev] [--listen HOST:PORT]`: the gateway
 * (docs/spec/design.md §3-6), stopped cleanly
 * by SIGINT, SIGTERM, SIGHUP, or (run by npm) its parent's exit, so that
 * stopping `npm start` never leaves a gateway holding the port.
 */
import { progressReporter, type Command } from '../command.ts';
import { VouchError } from '../../chain/errors.ts';

export const serve: Command = {
  name: 'serve',
  usage: '[--config FILE] [--dev] [--listen HOST:PORT]',
  summary: 'Runs the gateway: JSON lookups, verified downloads and (with an authority key) submit.',
  details: [
    'Without --config it runs the embedded default: listens on 127.0.0.1:8080, chain in ./var/chain,',
    'a development authority key and submit token created on first start (mode 0600) and printed once.',
    'A --config file is merged over the embedded default: mappings merge key by key, lists and scalars',
    'replace, so a file that sets only `listen` gets everything else (authority mode included) from the',
    'default. `authority: null` makes it read-only; a file that names its own chain (chain.remote, or a',
    'chain.dir other than ./var/chain) gets an authority only by writing one: the development key signs',
    "only the default's chain. Relative paths are relative to the file. `vouch config init` writes",
    'the complete default to start from. The gateway prints the mode, chain directory, routes and',
    'witnesses at start, and checks the chain directory, keys and port before it says `listening on`.',
    '--dev allows loopback and private origins (origin.allow_private: true) so a local submit works;',
    'it says so at start. Never use --dev in production.',
    'Stops cleanly on SIGINT, SIGTERM or SIGHUP; run by npm (npm start, npx), also when npm exits.',
  ].join('\n'),
  options: {
    config: {
      type: 'string',
      value: 'FILE',
      help: 'YAML configuration file, merged over the embedded default (vouch config init writes one; keys: docs/guide/configuration.md)',
    },
    dev: { type: 'boolean', help: 'development mode: allow loopback and private origins (origin.allow_private: true) for a local submit' },
    listen: { type: 'string', value: 'HOST:PORT', help: "where to listen (PORT, HOST:PORT or [V6]:PORT), over the config's listen" },
  },
  noResultOptions: true,
  async run(v) {
    // Loaded here so the other commands do not pay for the gateway's modules.
    const { defaultConfig, loadConfigFile } = await import('../../gateway/config.ts');
    const { startGateway } = await import('../../gateway/gateway.ts');
    const overrides = { dev: v.dev === true, ...(v.listen !== undefined ? { listen: v.listen as string } : {}) };
    const config = v.config ? loadConfigFile(v.config, overrides) : defaultConfig(process.cwd(), overrides);
    const bar = progressReporter('verifying the chain');
    const gw = await startGateway(config, { embeddedDefault: config.authority_from_default === true, dev: v.dev === true, onProgress: bar.update });
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      gw.ctx.log.info('stopping', { signal });
      gw.close().then(
        () => process.exit(0),
        () => process.exit(0),
      );
      setTimeout(() => process.exit(0), 12_000).unref();
    };
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => stop(signal));
    // Run by npm (`npm start`, `npx vouch serve`): npm forwards SIGINT and SIGTERM, but a shell between
    // it and us may not, and a killed npm forwards nothing. Stop when the process that started us is gone.
    if (process.env.npm_lifecycle_event !== undefined) {
      const parent = process.ppid;
      setInterval(() => {
        if (process.ppid !== parent) stop('parent exited');
      }, 500).unref();
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
