#!/usr/bin/env python3
"""Ports the expectations of the upstream Gateway API conformance tests into
data files, mechanically (docs/gateway-api.md).

Each upstream `conformance/tests/<test>.go` declares one or more
`confsuite.ConformanceTest{...}` values: a ShortName, the manifests the test
applies, and a Test function whose expectations are Go struct literals
(`http.ExpectedResponse{...}`, and the grpc/tcp/udp ones of the same name).
This script reads those literals with a small Go-expression reader (strings,
numbers, composite literals, maps, slices, `&T{}`, type conversions, string
`+`, local `x := ...` assignments, and the suite's named constants) and writes
one JSON file per test into `conformance/gateway/data/<ShortName>.json`, plus
`index.json`: which tests were ported with how many cases, and which were not
and why (no expectation literal, expectations built at run time, ...).

Nothing is written by hand: a case whose literal holds anything the reader
cannot evaluate (a call such as fmt.Sprintf, a loop variable) is listed under
`unported_cases` with the expression it stopped at, never guessed.

Why Python: a tokenizer and a recursive reader for a subset of Go expressions
are short in Python's standard library (no PyYAML: the output is JSON, which
YAML readers read too), and the script runs from a test without a build.

Usage:
  conformance/gateway/port.py [--upstream DIR] [--out DIR]   write the data
  conformance/gateway/port.py --check                        exit 1 if the
      committed data differs from what the upstream files give now
(run from anywhere; paths default relative to the repository root).
"""

import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_UPSTREAM = os.path.join(REPO, "..", "shared", "conformance-upstream", "gateway-api")
DEFAULT_OUT = os.path.join(REPO, "conformance", "gateway", "data")

# The suite's named constants the tests use (upstream
# conformance/utils/suite/suite.go, not part of the vendored copy). Each
# value is checked to appear in conformance/base/manifests.yaml, so a
# renamed namespace or Service upstream stops the port instead of porting
# stale names.
SUITE_CONSTANTS = {
    "confsuite.InfrastructureNamespace": "gateway-conformance-infra",
    "confsuite.AppBackendNamespace": "gateway-conformance-app-backend",
    "confsuite.WebBackendNamespace": "gateway-conformance-web-backend",
    "confsuite.InfrastructureGatewayName": "same-namespace",
    "confsuite.InfraBackendServiceNameV1": "infra-backend-v1",
    "confsuite.InfraBackendServiceNameV2": "infra-backend-v2",
    "confsuite.InfraBackendServiceNameV3": "infra-backend-v3",
}

# Packages of named enum values the expectations use (gRPC status codes,
# the round tripper's protocol names): kept as their selector text, such as
# "codes.Unimplemented", for a runner to map; they are names, not run-time
# values.
SYMBOL_PACKAGES = ("codes", "roundtripper")

# Packages of the helpers that send requests and judge expectations.
HELPER_PACKAGES = ("http", "grpc", "tcp", "udp", "tls")

# Packages whose `ExpectedResponse` literals are expectations.
EXPECTATION_PACKAGES = ("http", "grpc", "tcp", "udp")

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<char>'(?:[^'\\\n]|\\.)+')
  | (?P<num>0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>:=|\.\.\.|&&|\|\||==|!=|<=|>=|<-|\+\+|--|[-+*/%&|^<>=!(){}\[\],;:.])
    """,
    re.VERBOSE | re.DOTALL,
)


class GoError(Exception):
    """An expression the reader cannot evaluate (with what it stopped at)."""


class Unresolved:
    """A value known only at run time, kept with its source text."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return f"Unresolved({self.text})"


def tokenize(src):
    out = []
    pos = 0
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m:
            raise GoError(f"cannot read {src[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        out.append((kind, m.group()))
    return out


def go_string(kind, text):
    if kind == "raw":
        return text[1:-1]
    # Go's interpreted strings share JSON's escapes for what the tests use.
    return json.loads(text)


class Reader:
    """Reads Go expressions from a token list, starting at `pos`."""

    def __init__(self, tokens, env):
        self.t = tokens
        self.env = env

    def peek(self, i, k=0):
        return self.t[i + k] if i + k < len(self.t) else ("eof", "")

    def expect(self, i, text):
        if self.peek(i)[1] != text:
            raise GoError(f"expected {text!r}, found {self.peek(i)[1]!r}")
        return i + 1

    def text(self, start, end):
        """The source text of tokens, spaced as gofmt would in the usual
        cases (`fmt.Sprintf("/%d", 1)`)."""
        out = ""
        prev = ""
        for _, tok in self.t[start:end]:
            tight = prev in (".", "(", "[", "&", "") or tok in (".", "(", ")", "[", "]", ",")
            out += tok if tight else " " + tok
            prev = tok
        return out

    def skip_type(self, i):
        """Skips a type expression; returns the index after it."""
        kind, tok = self.peek(i)
        if tok in ("*", "&"):
            return self.skip_type(i + 1)
        if tok == "[":
            i = self.expect(i, "[")
            if self.peek(i)[1] != "]":
                i += 1  # array length
            i = self.expect(i, "]")
            return self.skip_type(i)
        if tok == "map":
            i = self.expect(i + 1, "[")
            i = self.skip_type(i)
            i = self.expect(i, "]")
            return self.skip_type(i)
        if tok == "struct":
            return self.skip_braces(i + 1)
        if kind == "ident":
            i += 1
            while self.peek(i)[1] == "." and self.peek(i + 1)[0] == "ident":
                i += 2
            return i
        raise GoError(f"expected a type, found {tok!r}")

    def skip_braces(self, i):
        i = self.expect(i, "{")
        depth = 1
        while depth:
            tok = self.peek(i)[1]
            if tok == "eof":
                raise GoError("unbalanced braces")
            depth += {"{": 1, "}": -1}.get(tok, 0)
            i += 1
        return i

    def skip_parens(self, i):
        i = self.expect(i, "(")
        depth = 1
        while depth:
            tok = self.peek(i)[1]
            if tok == "eof":
                raise GoError("unbalanced parentheses")
            depth += {"(": 1, ")": -1}.get(tok, 0)
            i += 1
        return i

    def composite(self, i, elided_keys):
        """`{...}` after a type; keyed elements become a dict, others a list."""
        i = self.expect(i, "{")
        items = []
        keyed = {}
        while self.peek(i)[1] != "}":
            if self.peek(i)[1] == "{":
                value, i = self.composite(i, elided_keys)
                items.append(value)
            else:
                start = i
                value, i = self.expr(i)
                if self.peek(i)[1] == ":":
                    key = value
                    if self.peek(start)[0] == "ident" and i == start + 1:
                        key = self.peek(start)[1]  # a field name
                    if self.peek(i + 1)[1] == "{":
                        value, i = self.composite(i + 1, elided_keys)
                    else:
                        value, i = self.expr(i + 1)
                    if isinstance(key, Unresolved):
                        raise GoError(f"map key {key.text}")
                    keyed[str(key)] = value
                else:
                    items.append(value)
            if self.peek(i)[1] == ",":
                i += 1
            elif self.peek(i)[1] != "}":
                raise GoError(f"expected ',' or '}}', found {self.peek(i)[1]!r}")
        i += 1
        if keyed and items:
            raise GoError("mixed keyed and positional elements")
        return (keyed if keyed else items), i

    def expr(self, i):
        value, i = self.unary(i)
        while self.peek(i)[1] == "+":
            right, i = self.unary(i + 1)
            if isinstance(value, str) and isinstance(right, str):
                value = value + right
            elif isinstance(value, int) and isinstance(right, int):
                value = value + right
            else:
                value = Unresolved(f"{value!r} + {right!r}")
        return value, i

    def unary(self, i):
        kind, tok = self.peek(i)
        if tok == "&":
            return self.unary(i + 1)
        if tok == "-" and self.peek(i + 1)[0] == "num":
            v, j = self.unary(i + 1)
            return -v, j
        if kind in ("str", "raw"):
            return go_string(kind, tok), i + 1
        if kind == "num":
            t = tok.replace("_", "")
            is_float = not t.lower().startswith("0x") and ("." in t or "e" in t.lower())
            return (float(t) if is_float else int(t, 0)), i + 1
        if tok in ("[", "map"):
            j = self.skip_type(i)
            return self.composite(j, True)
        if tok == "(":
            v, j = self.expr(i + 1)
            return v, self.expect(j, ")")
        if kind == "ident":
            return self.named(i)
        raise GoError(f"unexpected {tok!r}")

    def named(self, i):
        start = i
        name = self.peek(i)[1]
        i += 1
        while self.peek(i)[1] == "." and self.peek(i + 1)[0] == "ident":
            name += "." + self.peek(i + 1)[1]
            i += 2
        nxt = self.peek(i)[1]
        if nxt == "{" and name.split(".")[-1][0].isupper():
            return self.composite(i, True)
        if nxt == "(":
            end = self.skip_parens(i)
            args_start = i + 1
            # A conversion or pointer helper of one argument keeps its value:
            # v1.Namespace(ns), string(x), ptr.To(x), new-style type casts.
            conversion = name.split(".")[-1][:1].isupper() or name in (
                "string", "int", "int32", "int64", "ptr.To",
            )
            if conversion:
                try:
                    value, j = self.expr(args_start)
                    if j == end - 1:
                        return value, end
                except GoError:
                    pass
            return Unresolved(self.text(start, end)), end
        if name in ("true", "false"):
            return name == "true", i
        if name == "nil":
            return None, i
        if name in SUITE_CONSTANTS:
            return SUITE_CONSTANTS[name], i
        if name.count(".") == 1 and name.split(".")[0] in SYMBOL_PACKAGES:
            return name, i
        if name in self.env:
            return self.env[name], i
        return Unresolved(name), i


def unresolved_in(value, path=""):
    """The first run-time value inside `value`, with its field path."""
    if isinstance(value, Unresolved):
        return path or ".", value.text
    if isinstance(value, dict):
        for k, v in value.items():
            found = unresolved_in(v, f"{path}.{k}" if path else k)
            if found:
                return found
    if isinstance(value, list):
        for n, v in enumerate(value):
            found = unresolved_in(v, f"{path}[{n}]")
            if found:
                return found
    return None


def find_tests(tokens):
    """`var NAME = confsuite.ConformanceTest{...}`: name -> (literal range)."""
    out = {}
    for i in range(len(tokens) - 6):
        if (
            tokens[i][1] == "var"
            and tokens[i + 2][1] == "="
            and tokens[i + 3][1] == "confsuite"
            and tokens[i + 5][1] == "ConformanceTest"
            and tokens[i + 6][1] == "{"
        ):
            r = Reader(tokens, {})
            end = r.skip_braces(i + 6)
            out[tokens[i + 1][1]] = (i + 6, end)
    return out


def test_fields(tokens, start, end):
    """The top-level fields of a ConformanceTest literal: simple values read,
    `Test:` kept as a token range (a func literal) or a reference."""
    r = Reader(tokens, {})
    fields = {}
    i = start + 1
    while i < end - 1:
        key = tokens[i][1]
        i = r.expect(i + 1, ":")
        if key == "Test":
            if tokens[i][1] == "func":
                body_start = i
                while tokens[i][1] != "{":
                    i += 1
                i = r.skip_braces(i)
                fields["Test"] = ("func", body_start, i)
            else:
                value_start = i
                while tokens[i][1] not in (",", "}"):
                    i += 1
                fields["Test"] = ("ref", r.text(value_start, i))
        else:
            try:
                value, i = r.expr(i)
            except GoError:
                value_start = i
                depth = 0
                while depth or tokens[i][1] not in (",", "}"):
                    depth += {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}.get(tokens[i][1], 0)
                    i += 1
                value = Unresolved(r.text(value_start, i))
            fields[key] = value
        if tokens[i][1] == ",":
            i += 1
    return fields


def symbol(value):
    """`features.SupportHTTPRoute` -> `SupportHTTPRoute` (a name, kept)."""
    if isinstance(value, Unresolved):
        return value.text.split(".")[-1]
    return value


STATE_CHANGES = ("Delete", "Update", "Create", "Patch")


def scan_body(tokens, start, end):
    """Expectation literals in a Test body, in source order, with the local
    values known at each point and the Gateways the test names."""
    env = {}
    cases = []
    gateways = []
    r = Reader(tokens, env)
    # A test that deletes, updates or creates objects between its cases
    # (`suite.Client.Delete(...)`) expects the later cases of a state the
    # data does not carry: those cases are not ported.
    changed = None
    i = start
    while i < end:
        kind, tok = tokens[i]
        if (
            tok == "Client"
            and tokens[i + 1][1] == "."
            and tokens[i + 2][1] in STATE_CHANGES
            and tokens[i + 3][1] == "("
        ):
            changed = f"Client.{tokens[i + 2][1]}"
        # Local `x := expr` (and `x = expr`): remember what evaluates.
        if kind == "ident" and tokens[i + 1][1] == ":=":
            try:
                value, _ = r.expr(i + 2)
                if not isinstance(value, Unresolved):
                    env[tok] = value
                    if (
                        isinstance(value, dict)
                        and set(value) >= {"Name", "Namespace"}
                        and "gw" in tok.lower()
                        and value not in gateways
                        and not unresolved_in(value)
                    ):
                        gateways.append(value)
            except GoError:
                pass
        # pkg.ExpectedResponse{...} and []pkg.ExpectedResponse{{...}, ...}
        if (
            tok in EXPECTATION_PACKAGES
            and tokens[i + 1][1] == "."
            and tokens[i + 2][1] == "ExpectedResponse"
            and tokens[i + 3][1] == "{"
        ):
            slice_of = tokens[i - 1][1] == "]" and tokens[i - 2][1] == "["
            literal_start = i + 3
            if changed:
                cases.append((tok, None, f"after {changed}: the test changes its objects between cases, which the data does not carry"))
                i = r.skip_braces(literal_start)
                continue
            try:
                value, j = r.composite(literal_start, True)
                items = value if slice_of else [value]
                helper = consuming_call(tokens, i - 2 if slice_of else i, j, end)
                for item in items:
                    if helper:
                        item = {**item, "helper": helper}
                    cases.append((tok, item, None))
                i = j
                continue
            except GoError as e:
                cases.append((tok, None, f"{e} in {r.text(i, min(i + 12, end))} ..."))
                i = r.skip_braces(literal_start)
                continue
        i += 1
    return cases, gateways


def call_name(tokens, paren):
    """`pkg.Func` for the `(` at `paren`, or None."""
    if (
        tokens[paren - 1][0] == "ident"
        and tokens[paren - 2][1] == "."
        and tokens[paren - 3][1] in HELPER_PACKAGES
    ):
        return f"{tokens[paren - 3][1]}.{tokens[paren - 1][1]}"
    return None


def consuming_call(tokens, start, end_literal, end_body):
    """The helper that takes an expectation literal (its semantics: a
    consistent response, a failure, a mirrored request): the call it is an
    argument of, or, for a literal assigned to a variable, the first later
    call whose arguments name that variable or a `range` variable over it."""
    depth = 0
    names = set()
    for k in range(start - 1, 0, -1):
        t = tokens[k][1]
        if t in (")", "}", "]"):
            depth += 1
        elif t in ("(", "{", "["):
            if depth == 0:
                if t == "(" and call_name(tokens, k):
                    return call_name(tokens, k)
                # testCases = append(testCases, <literal>...)
                if t == "(" and tokens[k - 1][1] == "append" and tokens[k + 1][0] == "ident":
                    names.add(tokens[k + 1][1])
                    break
                if t != "(":
                    break
            else:
                depth -= 1
    if tokens[start - 1][1] in (":=", "=") and tokens[start - 2][0] == "ident":
        names.add(tokens[start - 2][1])
    if not names:
        return None
    k = end_literal
    while k < end_body:
        # for _, tc := range testCases {
        if tokens[k][1] == "range" and tokens[k + 1][1] in names and tokens[k - 1][1] == ":=":
            names.add(tokens[k - 2][1])
        # tc := testCases[i]
        if tokens[k][1] in names and tokens[k + 1][1] == "[" and tokens[k - 1][1] == ":=":
            names.add(tokens[k - 2][1])
        if tokens[k][1] == "(" and call_name(tokens, k):
            depth, m = 1, k + 1
            while depth and m < end_body:
                depth += {"(": 1, ")": -1}.get(tokens[m][1], 0)
                if tokens[m][0] == "ident" and tokens[m][1] in names and tokens[m - 1][1] != ".":
                    return call_name(tokens, k)
                m += 1
        k += 1
    return None


def port(upstream, out_dir=None):
    """Returns {file name: JSON text} for the data directory."""
    tests_dir = os.path.join(upstream, "conformance", "tests")
    base = open(os.path.join(upstream, "conformance", "base", "manifests.yaml")).read()
    for name, value in SUITE_CONSTANTS.items():
        if value not in base:
            raise SystemExit(f"{name} = {value!r} is not in conformance/base/manifests.yaml: the suite constants changed upstream; update SUITE_CONSTANTS")
    source = ""
    source_file = os.path.join(upstream, "SOURCE.txt")
    if os.path.exists(source_file):
        source = open(source_file).read().splitlines()[0]
    files = {}
    index = {"source": source, "tests": {}, "unported": {}}
    go_files = sorted(f for f in os.listdir(tests_dir) if f.endswith(".go"))
    parsed = {}
    for f in go_files:
        tokens = tokenize(open(os.path.join(tests_dir, f)).read())
        for var, (start, end) in find_tests(tokens).items():
            parsed[var] = (f, tokens, test_fields(tokens, start, end))
    for var in sorted(parsed, key=lambda v: (parsed[v][0], v)):
        f, tokens, fields = parsed[var]
        short = fields.get("ShortName")
        if not isinstance(short, str):
            index["unported"][var] = f"{f}: ShortName is not a string literal"
            continue
        test = fields.get("Test")
        body_tokens, body = tokens, None
        if test and test[0] == "func":
            body = (test[1], test[2])
        elif test and test[0] == "ref":
            ref = test[1].removesuffix(".Test")
            if ref in parsed and parsed[ref][2].get("Test", ("",))[0] == "func":
                _, body_tokens, ref_fields = parsed[ref]
                body = (ref_fields["Test"][1], ref_fields["Test"][2])
        if body is None:
            index["unported"][short] = f"{f}: its Test is not a function literal here ({test})"
            continue
        found, gateways = scan_body(body_tokens, *body)
        cases, unported_cases = [], []
        for n, (protocol, value, error) in enumerate(found):
            problem = error or (unresolved_in(value) and "{}: {} is computed at run time".format(*unresolved_in(value)))
            if problem:
                unported_cases.append({"index": n, "protocol": protocol, "reason": problem})
            else:
                cases.append({"protocol": protocol, **value})
        manifests = fields.get("Manifests", [])
        data = {
            "name": short,
            "description": fields.get("Description", ""),
            "source": f"conformance/tests/{f}",
            "features": [symbol(v) for v in fields.get("Features", [])] if isinstance(fields.get("Features"), list) else [],
            "manifests": manifests if isinstance(manifests, list) else [],
            "gateways": gateways,
            "cases": cases,
            "unported_cases": unported_cases,
        }
        if not found:
            used = sorted({t[1] for t in body_tokens[body[0]:body[1]] if t[0] == "ident" and t[1] in ("tls", "grpc", "tcp", "udp", "http", "kubernetes")})
            index["unported"][short] = (
                f"{f}: no ExpectedResponse literal (the test checks {', '.join(used) or 'nothing ported'} "
                "through helper calls or status conditions only)"
            )
            continue
        files[f"{short}.json"] = json.dumps(data, indent=2, sort_keys=True) + "\n"
        index["tests"][short] = {"file": f"{short}.json", "cases": len(cases), "unported_cases": len(unported_cases)}
    total = sum(t["cases"] for t in index["tests"].values())
    skipped = sum(t["unported_cases"] for t in index["tests"].values())
    index["summary"] = f"{len(index['tests'])} tests with {total} cases ported ({skipped} cases not), {len(index['unported'])} tests not ported"
    files["index.json"] = json.dumps(index, indent=2, sort_keys=True) + "\n"
    return files


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", default=DEFAULT_UPSTREAM)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--check", action="store_true", help="compare with the committed data instead of writing")
    args = p.parse_args()
    files = port(args.upstream)
    if args.check:
        on_disk = {f for f in os.listdir(args.out)} if os.path.isdir(args.out) else set()
        stale = sorted(
            f for f in set(files) | on_disk
            if f not in files or f not in on_disk or open(os.path.join(args.out, f)).read() != files[f]
        )
        if stale:
            print("conformance/gateway/data is not what port.py makes of the upstream files; run conformance/gateway/port.py:", file=sys.stderr)
            for f in stale:
                print(f"  {f}", file=sys.stderr)
            sys.exit(1)
        print(json.loads(files["index.json"])["summary"])
        return
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.endswith(".json") and f not in files:
            os.remove(os.path.join(args.out, f))
    for f, text in files.items():
        with open(os.path.join(args.out, f), "w") as fh:
            fh.write(text)
    print(json.loads(files["index.json"])["summary"])


if __name__ == "__main__":
    main()
