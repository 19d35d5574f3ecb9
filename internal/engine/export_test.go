package engine

// EagerDue is eagerDue, for the tests of package engine_test.
var EagerDue = &eagerDue

// ReplayAll is replayAll, for the tests of package engine_test.
var ReplayAll = &replayAll
