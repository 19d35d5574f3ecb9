package engine

// EagerDue is eagerDue, for the tests of package engine_test.
var EagerDue = &eagerDue
