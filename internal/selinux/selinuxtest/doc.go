// Package selinuxtest chooses the SELinux host the tests of the volume
// paths run against: the Fake of internal/selinux (an SELinux-enabled
// host translating labels as a real one), or, with
// $NODEKIT_SELINUX=host, this machine's own (internal/selinux.Host),
// which must then have SELinux enabled. internal/localvm's SELinux suite
// sets it in a guest booted with SELinux (permissive, Debian's reference
// policy), so the same tests that run against the Fake everywhere run
// against a real kernel and policy there.
//
// It owns the switch only; what a test checks on the real host (context
// mounts in mountinfo, file labels) is the test's.
package selinuxtest
