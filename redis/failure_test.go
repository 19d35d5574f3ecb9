package redis

import (
	"fmt"
	"testing"
)

func TestFailurePolicyString(t *testing.T) {
	for p, want := range map[FailurePolicy]string{
		FailError: "FailError", FailOpen: "FailOpen", FailClosed: "FailClosed", 7: "FailurePolicy(7)",
	} {
		if got := fmt.Sprint(p); got != want {
			t.Errorf("FailurePolicy %d prints %q, want %q", uint8(p), got, want)
		}
	}
}
