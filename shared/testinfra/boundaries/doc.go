// Package boundaries holds the test that enforces netdra's import rules:
// only the provisioner touches the host (netlink, eBPF), the provisioner
// holds no Kubernetes client, only dra, the operator and kubectl netdra
// (services/cli, a user's tool, not a node process) import client-go,
// and services meet only through the protos, never importing each other.
// It also keeps the house: no build output tracked by git
// (TestNoBinariesCommitted), flag help texts short
// (TestFlagHelpIsShort), and no package in shared/ with one user
// (TestSharedHasTwoUsers).
//
// It also holds the documentation (README.md, docs/*.md) to the code:
// every item of these classes a page names is checked against its source
// of truth, and a test fails on one it cannot find there.
//
//   - Packages: docs/layout.md names every package of the product module
//     (TestLayoutNamesEveryPackage, go list).
//   - Links: every relative link resolves to a file and a heading
//     (TestDocsLinks).
//   - Files: every repository path and file name resolves to a file
//     (TestDocsNameFilesThatExist); every host path (the state file, the
//     sockets, the hook binary) is one the code, the chart, pods/base or
//     the Makefile gives, or a listed outside one (TestDocsNameHostPaths).
//   - Flags: every flag given to a netdra program is one that program
//     defines: the flag calls of the packages it links (go list of its
//     dependencies), kubectl-netdra's cobra command tree
//     (TestDocsNameFlagsThatExist).
//   - Make targets and variables: every `make TARGET VAR=value` against
//     the Makefile's rules and variables (TestDocsMakeTargets).
//   - Names in capitals (environment and make variables, enum values):
//     the Makefile, the code's string constants, or a listed outside name
//     (TestDocsNamesInCapitals).
//   - Fields: every camelCase name or dotted path in a code span against
//     the CRDs, values.yaml, the claim parameters (claimconfig), the
//     protos, the Kubernetes objects and the repository's Go names
//     (TestDocsNameFieldsThatExist); the YAML examples decode strictly
//     into the API's types or parse as prepare parses claim parameters
//     (TestDocsConfigExamples). The claim parameters' table is generated
//     from claimconfig (its own test).
//   - Figures: every number with a unit of time, size or rate, or a
//     percentage, in a page's text is in a sentence checked against the
//     code's constants, the Makefile, the CRDs' schema, the rendered
//     manifests, the chart's alerts or a test's own setting
//     (TestDocsNumbers, TestDocsNumbersAllChecked); a measured figure is
//     not quoted but pointed to in bench/RESULTS.md.
//   - Defaults stated in words: a flag's, a Makefile variable's, a chart
//     value's, a constant's (TestDocsDefaults); versions of the test
//     world's parts against their go.mod files (TestDocsVersions).
package boundaries
