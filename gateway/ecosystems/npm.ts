/** PLACEHOLDER while the npm module is written: every request is an artifact. */
import type { EcosystemHandler } from './ecosystem.ts';

export const npm: EcosystemHandler = {
  kind: 'npm',
  classify: () => ({ type: 'artifact' }),
  errorBody: (message) => ({ contentType: 'text/plain; charset=utf-8', body: `${message}\n` }),
};
