// Package browsertest finds the Chromium that the module's browser tests
// drive (the bench report's, the server's pages).
package browsertest

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium is the browser to drive: RATELIMIT_BROWSER, or one on PATH.
// Without one the test skips, saying what it would have checked (what),
// unless CI=true or RATELIMIT_REQUIRE_BROWSER=1, which make it fail (CI
// installs Chromium).
func Chromium(t testing.TB, what string) string {
	t.Helper()
	if p := os.Getenv("RATELIMIT_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" || os.Getenv("RATELIMIT_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium on PATH, and the browser test is required here (CI=true or RATELIMIT_REQUIRE_BROWSER=1): apt-get install chromium, or set RATELIMIT_BROWSER")
	}
	t.Skip("skipping " + what + ": no Chromium on PATH (apt-get install chromium, or set RATELIMIT_BROWSER); RATELIMIT_REQUIRE_BROWSER=1 makes this a failure")
	return ""
}
