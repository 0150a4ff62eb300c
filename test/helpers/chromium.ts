/**
 * Debian's Chromium for the explorer tests, driven by playwright-core:
 * headless, no sandbox, nothing fetched from outside 127.0.0.1 (no
 * background networking, component updates or sync).
 * Must hold: one launch line for every browser test (VOUCH_CHROMIUM names
 * another binary).
 */
import { chromium, type Browser } from 'playwright-core';

export const CHROMIUM = process.env.VOUCH_CHROMIUM ?? '/usr/bin/chromium';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
