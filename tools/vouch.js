#!/usr/bin/env node
// Entry shim for `npx vouch`: runs the TypeScript CLI through tsx's loader.
import { register } from 'tsx/esm/api';
register();
await import('./cli.ts');
