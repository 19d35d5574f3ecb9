package httplimit

import (
	"strconv"
	"strings"
)

// member is one item of a RateLimit or RateLimit-Policy field: the
// policy's name and its Integer parameters (r, t, q, w).
type member struct {
	name   string
	params map[string]int64
}

// parseList parses a structured-field List (RFC 8941 section 4.2.1) of
// Items, keeping each item's bare value as a name (a String or a Token;
// others are kept as their text) and its Integer parameters. Inner lists
// are skipped. It returns the members parsed before the first syntax
// error, and whether there was none.
func parseList(v string) ([]member, bool) {
	p := sfParser{s: v}
	var out []member
	p.space()
	for !p.done() {
		if p.peek() == '(' { // an inner list: not a policy item
			if !p.skipInner() {
				return out, false
			}
			if _, ok := p.params(); !ok {
				return out, false
			}
		} else {
			name, ok := p.bare()
			if !ok {
				return out, false
			}
			params, ok := p.params()
			if !ok {
				return out, false
			}
			out = append(out, member{name: name, params: params})
		}
		p.ows()
		if p.done() {
			return out, true
		}
		if p.peek() != ',' {
			return out, false
		}
		p.i++
		p.ows()
		if p.done() {
			return out, false // a trailing comma
		}
	}
	return out, true
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) space() {
	for !p.done() && p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) ows() {
	for !p.done() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// bare parses a bare item and returns it as text: a String unescaped, a
// Token, a number, a Boolean or a Byte Sequence as written.
func (p *sfParser) bare() (string, bool) {
	if p.done() {
		return "", false
	}
	start := p.i
	switch c := p.peek(); {
	case c == '"':
		var b strings.Builder
		for p.i++; !p.done(); p.i++ {
			switch c := p.peek(); {
			case c == '\\':
				p.i++
				if p.done() || (p.peek() != '"' && p.peek() != '\\') {
					return "", false
				}
				b.WriteByte(p.peek())
			case c == '"':
				p.i++
				return b.String(), true
			case c < 0x20 || c > 0x7e:
				return "", false
			default:
				b.WriteByte(c)
			}
		}
		return "", false
	case c == '-' || (c >= '0' && c <= '9'):
		p.i++
		for !p.done() && (p.peek() >= '0' && p.peek() <= '9' || p.peek() == '.') {
			p.i++
		}
	case c == '?':
		p.i++
		if p.done() || (p.peek() != '0' && p.peek() != '1') {
			return "", false
		}
		p.i++
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return "", false
		}
		p.i += end + 2
	case c == '*' || isAlpha(c):
		for p.i++; !p.done() && isTokenChar(p.peek()); p.i++ {
		}
	default:
		return "", false
	}
	return p.s[start:p.i], true
}

// params parses ;key[=value] parameters, keeping the Integer ones.
func (p *sfParser) params() (map[string]int64, bool) {
	var out map[string]int64
	for !p.done() && p.peek() == ';' {
		p.i++
		p.space()
		start := p.i
		for !p.done() && (p.peek() >= 'a' && p.peek() <= 'z' || p.peek() >= '0' && p.peek() <= '9' || strings.IndexByte("_-.*", p.peek()) >= 0) {
			p.i++
		}
		key := p.s[start:p.i]
		if key == "" || !(key[0] == '*' || key[0] >= 'a' && key[0] <= 'z') {
			return out, false
		}
		if p.done() || p.peek() != '=' {
			continue // a Boolean true
		}
		p.i++
		v, ok := p.bare()
		if !ok {
			return out, false
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && len(v) <= 16 {
			if out == nil {
				out = make(map[string]int64, 2)
			}
			out[key] = n
		}
	}
	return out, true
}

// skipInner skips an inner list, "(" items ")".
func (p *sfParser) skipInner() bool {
	p.i++
	for {
		p.space()
		if p.done() {
			return false
		}
		if p.peek() == ')' {
			p.i++
			return true
		}
		if _, ok := p.bare(); !ok {
			return false
		}
		if _, ok := p.params(); !ok {
			return false
		}
	}
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isTokenChar(c byte) bool {
	return isAlpha(c) || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
