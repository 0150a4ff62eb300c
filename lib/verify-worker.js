// Worker entry for parallel chain verification: loads the TypeScript
// implementation through tsx's loader (workers do not inherit it).
import { register } from 'tsx/esm/api';
register();
await import('./verify-worker-impl.ts');
