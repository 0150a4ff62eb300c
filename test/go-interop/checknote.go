// checknote: Go's reference implementation (golang.org/x/mod/sumdb/note and
// sumdb/tlog) checks what vouch's chain/ code produced: a signed checkpoint
// note, inclusion proofs and consistency proofs.
//
// Build mode: GOPATH, with Debian's golang-golang-x-mod-dev:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run checknote.go < input.json
//
// Input (JSON on stdin):
//
//	{"vkey": "<name>+<hex8>+<base64>", "note": "<signed checkpoint note>",
//	 "open": {"vkeys": ["<vkey>", ...], "note": "<any signed note>"},
//	 "inclusion": [{"index": I, "size": N, "leaf_entry_b64": "...", "proof": ["<b64>", ...], "root_b64": "..."}],
//	 "consistency": [{"from": A, "to": B, "old_root": "<b64>", "new_root": "<b64>", "proof": ["<b64>", ...]}]}
//
// `open`: note.Open of any note with those keys, nothing more; prints
// "ok open verified=<name+hash,...> unverified=<name+hash,...>".
//
// Prints one line per check ("ok ..." or "FAIL ...") and exits 1 at the
// first failure, 2 on bad input.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type inclusion struct {
	Index        int64    `json:"index"`
	Size         int64    `json:"size"`
	LeafEntryB64 string   `json:"leaf_entry_b64"`
	Proof        []string `json:"proof"`
	RootB64      string   `json:"root_b64"`
}

type consistency struct {
	From    int64    `json:"from"`
	To      int64    `json:"to"`
	OldRoot string   `json:"old_root"`
	NewRoot string   `json:"new_root"`
	Proof   []string `json:"proof"`
}

type open struct {
	Vkeys []string `json:"vkeys"`
	Note  string   `json:"note"`
}

type input struct {
	Open        *open         `json:"open"`
	Vkey        string        `json:"vkey"`
	Note        string        `json:"note"`
	Inclusion   []inclusion   `json:"inclusion"`
	Consistency []consistency `json:"consistency"`
}

func fail(format string, args ...interface{}) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func hash(b64 string) (tlog.Hash, error) {
	var h tlog.Hash
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return h, err
	}
	if len(b) != tlog.HashSize {
		return h, fmt.Errorf("hash is %d bytes", len(b))
	}
	copy(h[:], b)
	return h, nil
}

func hashes(list []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, 0, len(list))
	for _, s := range list {
		h, err := hash(s)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Printf("bad input: %v\n", err)
		os.Exit(2)
	}

	if in.Open != nil {
		var vs []note.Verifier
		for _, k := range in.Open.Vkeys {
			v, err := note.NewVerifier(k)
			if err != nil {
				fail("note.NewVerifier(%q): %v", k, err)
			}
			vs = append(vs, v)
		}
		n, err := note.Open([]byte(in.Open.Note), note.VerifierList(vs...))
		if err != nil {
			fail("note.Open: %v", err)
		}
		names := func(sigs []note.Signature) string {
			out := make([]string, 0, len(sigs))
			for _, s := range sigs {
				out = append(out, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
			}
			return strings.Join(out, ",")
		}
		fmt.Printf("ok open verified=%s unverified=%s\n", names(n.Sigs), names(n.UnverifiedSigs))
	}

	if in.Note != "" {
		v, err := note.NewVerifier(in.Vkey)
		if err != nil {
			fail("note.NewVerifier(%q): %v", in.Vkey, err)
		}
		n, err := note.Open([]byte(in.Note), note.VerifierList(v))
		if err != nil {
			fail("note.Open: %v", err)
		}
		lines := strings.Split(n.Text, "\n")
		if len(lines) < 4 || lines[len(lines)-1] != "" {
			fail("checkpoint body has %d lines", len(lines)-1)
		}
		if lines[0] != v.Name() {
			fail("checkpoint origin %q is not the key name %q", lines[0], v.Name())
		}
		size, err := strconv.ParseInt(lines[1], 10, 64)
		if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
			fail("checkpoint size %q", lines[1])
		}
		root, err := hash(lines[2])
		if err != nil {
			fail("checkpoint root %q: %v", lines[2], err)
		}
		fmt.Printf("ok note %s size=%d root=%s sigs=%d\n", v.Name(), size, root, len(n.Sigs))
	}

	for _, c := range in.Inclusion {
		entry, err := base64.StdEncoding.DecodeString(c.LeafEntryB64)
		if err != nil {
			fail("inclusion %d/%d: leaf entry: %v", c.Index, c.Size, err)
		}
		proof, err := hashes(c.Proof)
		if err != nil {
			fail("inclusion %d/%d: proof: %v", c.Index, c.Size, err)
		}
		root, err := hash(c.RootB64)
		if err != nil {
			fail("inclusion %d/%d: root: %v", c.Index, c.Size, err)
		}
		if err := tlog.CheckRecord(tlog.RecordProof(proof), c.Size, root, c.Index, tlog.RecordHash(entry)); err != nil {
			fail("inclusion %d/%d: %v", c.Index, c.Size, err)
		}
		fmt.Printf("ok inclusion %d/%d\n", c.Index, c.Size)
	}

	for _, c := range in.Consistency {
		proof, err := hashes(c.Proof)
		if err != nil {
			fail("consistency %d->%d: proof: %v", c.From, c.To, err)
		}
		oldRoot, err := hash(c.OldRoot)
		if err != nil {
			fail("consistency %d->%d: old root: %v", c.From, c.To, err)
		}
		newRoot, err := hash(c.NewRoot)
		if err != nil {
			fail("consistency %d->%d: new root: %v", c.From, c.To, err)
		}
		if err := tlog.CheckTree(tlog.TreeProof(proof), c.To, newRoot, c.From, oldRoot); err != nil {
			fail("consistency %d->%d: %v", c.From, c.To, err)
		}
		fmt.Printf("ok consistency %d->%d\n", c.From, c.To)
	}
}
