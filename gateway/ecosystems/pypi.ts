/** PLACEHOLDER while the pypi module is written: every request is an artifact. */
import type { EcosystemHandler } from './ecosystem.ts';

export const pypi: EcosystemHandler = {
  kind: 'pypi',
  classify: () => ({ type: 'artifact' }),
  errorBody: (message) => ({ contentType: 'text/plain; charset=utf-8', body: `${message}\n` }),
};
