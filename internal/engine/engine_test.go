package engine

import "testing"

// The engine refuses a model whose Caps it cannot run, and runs those of
// the module's algorithms.
func TestCheckCaps(t *testing.T) {
	for _, c := range []Caps{Reserves | Refunds | Holds, Refunds | Holds, Refunds | Clones | Holds, Releases | Timeless, Holds} {
		if err := checkCaps(c); err != nil {
			t.Errorf("%#x: %v", uint8(c), err)
		}
	}
	for _, c := range []Caps{0, Refunds, Reserves | Holds, Refunds | Clones, Timeless} {
		if checkCaps(c) == nil {
			t.Errorf("%#x accepted", uint8(c))
		}
	}
}

// A Defaults method panics, naming the capability.
func TestDefaultsPanic(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("Defaults.Used did not panic")
		}
	}()
	Defaults[int]{}.Used(0, 0)
}
