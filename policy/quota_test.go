package policy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/quota"
)

// TestQuotaJSON: a calendar quota's policy in JSON, as the one line of
// policy/algorithms.go makes it known: its period, first day of the week
// (weekly periods only) and time zone, written and read back.
func TestQuotaJSON(t *testing.T) {
	for _, c := range []struct {
		cfg  quota.Config
		want string
	}{
		{quota.Config{Limit: 10000, Period: quota.Month, Timezone: "Europe/Paris"}, `"quota":{"limit":10000,"period":"month","timezone":"Europe/Paris"}`},
		{quota.Config{Limit: 1000, Period: quota.Day}, `"quota":{"limit":1000,"period":"day"}`},
		{quota.Config{Limit: 50, Period: quota.Week, WeekStart: time.Monday, Timezone: "America/New_York"}, `"quota":{"limit":50,"period":"week","week_start":"monday","timezone":"America/New_York"}`},
		{quota.Config{Limit: 50, Period: quota.Week}, `"quota":{"limit":50,"period":"week","week_start":"sunday"}`},
	} {
		p := Policy{Name: "plan", Config: c.cfg, Key: "user", Apps: []string{"api"}}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"name":"plan","algorithm":"quota",` + c.want + `,"key":"user","apps":["api"]}`; string(b) != want {
			t.Errorf("got  %s\nwant %s", b, want)
		}
		var q Policy
		if err := json.Unmarshal(b, &q); err != nil || q.Config != p.Config {
			t.Errorf("%s read back as %+v, %v", b, q.Config, err)
		}
	}
}

// TestQuotaJSONRefusals: an invalid period, first day or time zone is
// refused, the field and the value named.
func TestQuotaJSONRefusals(t *testing.T) {
	for _, c := range []struct {
		config, field, value, reason string
	}{
		{`{"limit":10,"period":"fortnight"}`, "quota.period", `"fortnight"`, "must be one of day, week, month, year"},
		{`{"limit":10,"period":"Month"}`, "quota.period", `"Month"`, "must be one of"},
		{`{"limit":10}`, "quota.period", `""`, "is required"},
		{`{"limit":10,"period":"day","timezone":"Mars/Olympus"}`, "quota.timezone", `"Mars/Olympus"`, "is not a time zone of the IANA database"},
		{`{"limit":10,"period":"day","timezone":"Local"}`, "quota.timezone", `"Local"`, "differs from host to host"},
		{`{"limit":10,"period":"week","week_start":"funday"}`, "quota.week_start", `"funday"`, "must be one of sunday, monday"},
		{`{"limit":10,"period":"day","week_start":"monday"}`, "quota.week_start", `"monday"`, "applies to weekly periods only"},
		{`{"limit":0,"period":"day"}`, "quota.limit", "0", ""},
		{`{"limit":10,"period":"day","timezone":3}`, "quota.timezone", "3", "must be a string"},
	} {
		doc := `{"name":"plan","algorithm":"quota","quota":` + c.config + `,"key":"user","apps":["api"]}`
		_, err := Decode(strings.NewReader(doc))
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidPolicy) || fe.Field != c.field || fe.Value != c.value || !strings.Contains(fe.Reason, c.reason) {
			t.Errorf("%s: %v (%+v), want field %s, value %s, reason saying %q", c.config, err, fe, c.field, c.value, c.reason)
		}
	}
}

// TestRegistryQuota: a registry decides a quota policy per key.
func TestRegistryQuota(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	if _, err := s.Create(ctx, Policy{Name: "plan", Config: quota.Config{Limit: 3, Period: quota.Month, Timezone: "Europe/Paris"}, Key: "user", Apps: []string{"api"}}, "a"); err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, s, Options{})
	if got := grants(t, r, "plan", "u1", "api", 5); got != 3 {
		t.Errorf("u1: %d grants, want 3", got)
	}
	l, err := r.Peek(ctx, "plan", "u1")
	if d, ok := l.RetryAfter(); err != nil || l.Acquired() || !ok || d <= 0 || d > 31*24*time.Hour {
		t.Errorf("Peek after the month's quota: %v (%v, %v), %v; want refused until the month's end", l, d, ok, err)
	}
}
