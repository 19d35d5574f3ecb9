package redis

import "fmt"

// String is the policy's name as in Go: "FailError", "FailOpen",
// "FailClosed"; another value is "FailurePolicy(n)".
func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "FailError"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}
