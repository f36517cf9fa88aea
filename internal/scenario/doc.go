// Package scenario runs scripted tests kept in testdata/*.txt files, in
// the style of etcd-io/raft's datadriven tests. A file is a sequence of
// commands, each one line of a name and arguments, optional input lines,
// a "----" separator and the output the command is expected to print,
// ended by a blank line:
//
//	# a comment
//	add name=web restart=Always containers=(app)
//	----
//	ok
//
//	exit pod=web container=app code=1
//	----
//
// Arguments are key=value, key=(v1,v2) or a bare key. Run hands each
// command to the test's function and compares what it returns with the
// expected output; with rewrite set (a test's -rewrite flag) it writes the
// actual outputs back into the file instead.
//
// It owns only the file format; what the commands mean is the test's.
// Outputs may not contain blank lines.
package scenario
