/** PLACEHOLDER while the goproxy module is written: every request is an artifact. */
import type { EcosystemHandler } from './ecosystem.ts';

export const goproxy: EcosystemHandler = {
  kind: 'goproxy',
  classify: () => ({ type: 'artifact' }),
  errorBody: (message) => ({ contentType: 'text/plain; charset=utf-8', body: `${message}\n` }),
};
