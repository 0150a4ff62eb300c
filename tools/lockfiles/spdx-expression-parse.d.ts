/**
 * Types of the `spdx-expression-parse` package (CommonJS, ships none): one
 * function that parses an SPDX license expression against the SPDX license
 * and exception lists, and throws on anything else.
 */
declare module 'spdx-expression-parse' {
  export type SpdxInfo = { license: string; plus?: true; exception?: string } | { left: SpdxInfo; conjunction: 'and' | 'or'; right: SpdxInfo };
  function parse(expression: string): SpdxInfo;
  export default parse;
}
