// The documentation site (VitePress; docs/decisions/docs-site.md says why). `npm run docs:build` renders docs/
// into docs/.vitepress/dist (git-ignored) and fails on a link to a page or heading that does not exist.
import { defineConfig } from 'vitepress';

/** GitHub's heading anchors, so a link works the same in the repository browser and on the site. */
export function slugify(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const guide = [
  ['Running a gateway', 'gateway'],
  ['Operations', 'operations'],
  ['Configuration', 'configuration'],
  ['The command line', 'cli'],
  ['Mirrors and push', 'mirrors'],
  ['Witnesses', 'witnesses'],
  ['Proxy routes', 'proxy-routes'],
  ['Package managers', 'ecosystems'],
  ['npm', 'npm'],
  ['PyPI', 'pypi'],
  ['Go modules', 'go'],
  ['Maven', 'maven'],
  ['OCI images', 'oci'],
  ['Mirror fleets', 'fleet'],
  ['Complete answers', 'completeness'],
  ['Endorsing a lockfile', 'endorsing-lockfiles'],
  ['Revoking', 'revoking'],
  ['Auditing offline', 'auditing'],
  ['Observability', 'observability'],
  ['Key runbook', 'key-runbook'],
];
const spec = [
  ['Design of record', 'design'],
  ['Chain format', 'chain'],
  ['Verification codes', 'verification'],
  ['Repository layout', 'repository'],
  ['HTTP contract', 'http'],
  ['Transparency', 'transparency'],
  ['Key events', 'key-events'],
  ['Completeness index', 'index'],
];
const reference = [
  ['Command line', 'cli'],
  ['Configuration keys', 'configuration'],
  ['Statuses and error codes', 'errors'],
  ['Metrics', 'metrics'],
  ['OpenAPI', 'openapi'],
];
const items = (dir: string, list: string[][]) => list.map(([text, page]) => ({ text, link: `/${dir}/${page}` }));

export default defineConfig({
  title: 'vouch',
  description: 'Self-hostable artifact provenance: a signed hash chain in git, and a gateway that serves only verified bytes',
  cleanUrls: true,
  lastUpdated: false,
  // Raw HTML off: the pages are read as plain Markdown on a forge too, and `<project>` in prose is text, not a tag.
  markdown: { html: false, anchor: { slugify } },
  // A link that leaves docs/ points at one of the repository's own files (SECURITY.md, bench/RESULTS.md, sources), not
  // a page of the site: VitePress checks only links to pages, and test/unit/docs-links.test.ts checks every link and anchor
  // of the Markdown files, these included, against the repository.
  ignoreDeadLinks: [/^\.\/(\.\.\/)+(bench\/RESULTS|SECURITY|README|CONTRIBUTING|CHANGELOG)$/],
  themeConfig: {
    search: { provider: 'local' },
    sidebar: [
      { text: 'Guides', items: items('guide', guide) },
      { text: 'Specification', items: items('spec', spec) },
      { text: 'Reference (generated)', items: items('reference', reference) },
      {
        text: 'More',
        items: [
          { text: 'Performance', link: '/performance' },
          { text: 'Decision records', link: '/decisions/' },
          { text: 'Project layout', link: '/project-layout' },
        ],
      },
    ],
  },
});
