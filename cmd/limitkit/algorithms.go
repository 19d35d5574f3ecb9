package main

import (
	"encoding/json"
	"net/http"

	"github.com/limitkit/ratelimit/internal/algo"
)

// descriptor is an algorithm as the pages build its form: its name and
// its parameters, each with its kind ("count", "duration", "rate",
// "queue", "text") and, for a text, the values it may take.
type descriptor struct {
	Name   string       `json:"name"`
	Fields []fieldOfAlg `json:"fields"`
}

type fieldOfAlg struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Choices []string `json:"choices,omitempty"`
}

var kindNames = map[algo.Kind]string{algo.Count: "count", algo.Duration: "duration", algo.Rate: "rate", algo.Queue: "queue", algo.Text: "text"}

// algorithmsJS is the script /algorithms.js: the registered algorithms'
// descriptors as the constant DESCRIPTORS, read by common.js, so that the
// pages offer an algorithm their own table does not describe (a calendar
// quota) from its descriptor. A script rather than an API call keeps the
// pages' setup synchronous.
var algorithmsJS = func() []byte {
	var ds []descriptor
	for _, name := range algo.Names() {
		fields, _ := algo.Fields(name)
		d := descriptor{Name: name, Fields: []fieldOfAlg{}}
		for _, f := range fields {
			d.Fields = append(d.Fields, fieldOfAlg{Name: f.Name, Kind: kindNames[f.Kind], Choices: f.Choices})
		}
		ds = append(ds, d)
	}
	b, _ := json.Marshal(ds)
	return append(append([]byte("'use strict';\n// The algorithms' descriptors, written by the server (algorithms.go).\nconst DESCRIPTORS = "), b...), ";\n"...)
}()

func serveAlgorithms(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(algorithmsJS)
}
