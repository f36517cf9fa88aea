// Package imageref splits a container image reference,
// [domain[:port]/]path[:tag][@algorithm:hex], into its name, tag and
// digest, and says whether it is valid. The grammar is the distribution
// reference grammar reduced to what decides validity, as the agent needs
// it to add ":latest" before a pull and to key pull records by name.
//
// It is a hand-written scanner rather than the grammar's regular
// expression: compiled, that expression took about 135 KB of heap that
// stayed live for the agent's whole life, once in each package that
// needed it. The test checks the scanner against the expression.
package imageref
