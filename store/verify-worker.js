// Fallback worker entry for parallel chain verification, used only when no
// plain-JS bundle can be had (platform/worker-bundle.ts): loads the TypeScript
// implementation through tsx's loader (workers do not inherit it).
import { register } from 'tsx/esm/api';
register();
await import('./verify-worker-impl.ts');
