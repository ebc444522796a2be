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

The test's status checks (each `kubernetes.*` helper call that asserts
conditions, listeners, parents or attached routes) are written as `checks`:
the helper, the enclosing `t.Run`, and its arguments evaluated the same way
(Gateway API constants read by the API's naming rule, status structs with
Go's zero values).

Nothing is written by hand: a case or check holding anything the reader
cannot evaluate (a call of a function it does not know, a value known only
at run time) is listed under `unported_cases` / `unported_checks` with the
expression it stopped at, never guessed.

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
# conformance/utils/suite/consts.go, not part of the vendored copy). Each
# value is checked to appear in the base or test manifests, so a renamed
# namespace, Service or route upstream stops the port instead of porting
# stale names.
SUITE_CONSTANTS = {
    "confsuite.InfrastructureNamespace": "gateway-conformance-infra",
    "confsuite.AppBackendNamespace": "gateway-conformance-app-backend",
    "confsuite.WebBackendNamespace": "gateway-conformance-web-backend",
    "confsuite.InfrastructureGatewayName": "gateway-conformance-infra-test",
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

# Import paths, by which a file's own import names are told apart (a test
# may import the suite as `suite` and name its parameter `s`, or import it
# as `confsuite` and name the parameter `suite`).
SUITE_PACKAGE = "sigs.k8s.io/gateway-api/conformance/utils/suite"
KUBERNETES_PACKAGE = "sigs.k8s.io/gateway-api/conformance/utils/kubernetes"
GATEWAY_API_PACKAGES = "sigs.k8s.io/gateway-api/apis/"
METAV1_PACKAGE = "k8s.io/apimachinery/pkg/apis/meta/v1"

# Where the reader keeps what is not a local variable in its `env`: the
# file's imports (name -> path), the package's top-level values and
# functions, and the name the Test function gives the suite.
IMPORTS = "\0imports"
PACKAGE = "\0package"
SUITE_PARAM = "\0suite"

# Gateway API constants are read by the API's naming rule:
# `<Kind>Condition<X>` and `<Kind>Reason<X>` are "X", `<X>ProtocolType` is
# "X" (checked against apis/v1 at the vendored commit: every constant of
# those names but the two below follows it). The rest are this table.
CONDITION_KINDS = (
    "GatewayClass", "Gateway", "ListenerSet", "ListenerEntry", "Listener", "Route", "Policy", "BackendTLSPolicy",
)
GATEWAY_API_CONSTANTS = {
    "GroupName": "gateway.networking.k8s.io",
    "GroupVersion.Group": "gateway.networking.k8s.io",
    "GatewayClassConditionStatusAccepted": "Accepted",
    "GatewayClassConditionStatusSupportedVersion": "SupportedVersion",
}
METAV1_CONSTANTS = {"ConditionTrue": "True", "ConditionFalse": "False", "ConditionUnknown": "Unknown"}

# Go's zero values for the fields of the status types the checks spell out,
# filled in where a literal leaves a field out, as Go does (the helpers
# compare every field: an unset `SupportedKinds` is nil, an unset
# `AttachedRoutes` 0). `metav1.Condition`'s Message and ObservedGeneration
# are kept only when set: the helpers never compare them unset.
STRUCT_ZERO_VALUES = {
    (METAV1_PACKAGE, "Condition"): {"Type": "", "Status": "", "Reason": ""},
    (GATEWAY_API_PACKAGES, "ListenerStatus"): {"Name": "", "SupportedKinds": None, "Conditions": None, "AttachedRoutes": 0},
    (GATEWAY_API_PACKAGES, "ListenerEntryStatus"): {"Name": "", "SupportedKinds": None, "Conditions": None, "AttachedRoutes": 0},
    (GATEWAY_API_PACKAGES, "RouteGroupKind"): {"Group": None, "Kind": ""},
    (GATEWAY_API_PACKAGES, "RouteParentStatus"): {"ParentRef": None, "ControllerName": "", "Conditions": None},
    (GATEWAY_API_PACKAGES, "ParentReference"): {
        "Group": None, "Kind": None, "Namespace": None, "Name": "", "SectionName": None, "Port": None,
    },
    ("k8s.io/apimachinery/pkg/types", "NamespacedName"): {"Name": "", "Namespace": ""},
    ("k8s.io/apimachinery/pkg/runtime/schema", "GroupKind"): {"Group": "", "Kind": ""},
}
# A field whose value is itself one of those types (an element type is
# written in the slice type; a plain field's is not).
STRUCT_FIELD_TYPES = {"ParentRef": (GATEWAY_API_PACKAGES, "ParentReference")}

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


class GatewayAddress:
    """The address `kubernetes.GatewayAnd*RoutesMustBeAccepted` and
    `kubernetes.WaitForGatewayAddress` return for a Gateway: its first
    `status.addresses` entry, joined with the port of the listener the
    GatewayRef names (the first listener when it names none), or without a
    port when the caller passed `usePort` false."""

    def __init__(self, gateway, listener, use_port, port=None):
        self.gateway = gateway
        self.listener = listener
        self.use_port = use_port
        self.port = port

    def json(self):
        out = {**self.gateway, "Listener": self.listener, "UsePort": self.use_port}
        if self.port is not None:
            out["Port"] = self.port
        return out


class TLSSecretPart:
    """One of the values `kubernetes.GetTLSSecret(client, nn)` returns: the
    Secret's certificate (`tls.crt`) or key (`tls.key`), which the runner
    reads from the Secret it wrote (the suite makes these Secrets at run
    time)."""

    def __init__(self, secret, key):
        self.secret = secret
        self.key = key

    def json(self):
        return {"Secret": self.secret, "Key": self.key}


class RouteHostnames:
    """The hostnames `kubernetes.GatewayAndTLSRoutesMustBeAccepted` returns:
    the `spec.hostnames` of the routes it was given, in order; indexed, one
    of them (`string(hostnames[0])`), which the runner reads from the
    manifests."""

    def __init__(self, routes):
        self.routes = routes


class Fetched:
    """An object the test read with `Client.Get(ctx, nn, obj)`: its kind
    (from `obj := &pkg.Kind{}`) and the name it was read by. Its fields are
    known only at run time; a field read from it is a FieldRef."""

    def __init__(self, kind, nn, text, after_change=False):
        self.kind = kind
        self.nn = nn
        self.text = text
        # Read after a step changed objects: its fields are not what the
        # manifests held before the first step (FieldRef), so not data.
        self.after_change = after_change


class FieldRef:
    """A field of a Fetched object (`sharedCM.Data["ca.crt"]`,
    `policy.Spec.Validation.CACertificateRefs`): written into a step as
    `{"FromObject": {Kind, Namespace, Name, Path}}`, the runner reading it
    from the object as the test's manifests held it before its first step."""

    def __init__(self, fetched, path, text):
        self.fetched = fetched
        self.path = path
        self.text = text

    def json(self):
        return {"FromObject": {
            "Kind": self.fetched.kind, "Namespace": self.fetched.nn.get("Namespace", ""),
            "Name": self.fetched.nn.get("Name", ""), "Path": self.path,
        }}


class Mutation:
    """`mutate := original.DeepCopy()` of a Fetched object, with the field
    assignments read since (JSON Patch operations, RFC 6902), or the reason
    one could not be read; `Client.Patch(ctx, mutate, client.MergeFrom(original))`
    makes it a step."""

    def __init__(self, fetched, text):
        self.fetched = fetched
        self.text = text
        self.ops = []
        self.problem = None


class KubeObject:
    """A Kubernetes object the test writes as a Go literal
    (`&v1alpha2.TCPRoute{ObjectMeta: ..., Spec: ...}`): as its JSON."""

    def __init__(self, value, text):
        self.value = value
        self.text = text

    @property
    def kind(self):
        return self.value["kind"]

    @property
    def nn(self):
        meta = self.value.get("metadata", {})
        return {"Name": meta.get("name", ""), "Namespace": meta.get("namespace", "")}


class KeepWhere:
    """The list a loop builds from a Mutation's list, keeping the elements
    whose field has a value (`for _, l := range mutate.Spec.Listeners { if
    l.Name == "http" { kept = append(kept, l) } }`); assigned back to the
    same field, the patch operation `{"op": "keep", "path", "where"}`."""

    def __init__(self, mutation, pointer, where, text):
        self.mutation = mutation
        self.pointer = pointer
        self.where = where
        self.text = text


class MergeBase:
    """`patch := client.MergeFrom(obj.DeepCopy())` of a Fetched `obj`: the
    patch base, `obj` itself then the Mutation the assignments change
    (controller-runtime's other idiom: `client.Patch(ctx, obj, patch)`)."""

    def __init__(self, mutation, text):
        self.mutation = mutation
        self.text = text


class Listed:
    """What `Client.List(ctx, list, opts...)` leaves in `list`: the
    objects of a kind in a namespace whose labels match a selector, known
    only at run time; `list.Items` is a RunList."""

    def __init__(self, kind, namespace, selector, text):
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.text = text

    def json(self):
        return {"List": {"Kind": self.kind, "Namespace": self.namespace, "Selector": kube_json(self.selector, "selector")}}


class RunList:
    """The items of a Listed (`pods.Items`): a list known only at run time,
    which a loop over it writes as `forEach`."""

    def __init__(self, listed, text):
        self.listed = listed
        self.text = text


class Each:
    """The element a loop over a run-time list binds (`for _, pod := range
    pods.Items`): its fields are EachRefs."""

    def __init__(self, var, path=""):
        self.var = var
        self.path = path
        self.text = var

    def json(self):
        return {"Each": self.var, "Path": self.path}


class EachRef(Each):
    """A field of an Each (`pod.Spec.NodeName`, `pod.GetName()`,
    `podIP.IP`): `{"Each": var, "Path": JSON pointer}`."""


class GoMethod:
    """A method expression of the standard library (`netip.Addr.Is4`): a
    function value, called on a run-time value as a Predicate."""

    def __init__(self, name):
        self.name = name
        self.text = name


class Predicate:
    """A condition on run-time values, as data: `{"Func": name, "Args":
    [...]}` for a GoMethod called, `{"Not": p}` for `!p`."""

    def __init__(self, value, text):
        self.value = value
        self.text = text


# Calls whose value is their one argument as the data writes it: a
# `netip.Addr` is written as its text, a `labels.Selector` as the
# `LabelSelector` it was made from.
IDENTITY_CALLS = {
    ("net/netip", "ParseAddr"),
    ("net/netip", "MustParseAddr"),
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "LabelSelectorAsSelector"),
}

# Values the reader keeps but which are not plain data: in a case or a
# check they are run-time values.
RUNTIME_VALUES = (Fetched, FieldRef, Mutation, KubeObject, KeepWhere, MergeBase, Listed, RunList, Each, Predicate)
# A field holding an embedded struct (`CommonRouteSpec:
# gatewayv1.CommonRouteSpec{...}`) is read under this prefix: Kubernetes'
# JSON inlines it.
INLINE = "\0inline:"


def json_field_name(go):
    """The JSON name of a Go field of the Kubernetes and Gateway APIs
    (`CACertificateRefs` -> `caCertificateRefs`, `TLS` -> `tls`)."""
    run = re.match(r"[A-Z0-9]*", go).group(0)
    if len(run) == len(go):
        return go.lower()
    if len(run) <= 1:
        return go[:1].lower() + go[1:]
    return run[:-1].lower() + go[len(run) - 1:]


def api_version(path):
    """`apiVersion` of a kind in the Go package `path`
    (`sigs.k8s.io/gateway-api/apis/v1alpha2`, `k8s.io/api/core/v1`)."""
    if path.startswith(GATEWAY_API_PACKAGES):
        return "gateway.networking.k8s.io/" + path[len(GATEWAY_API_PACKAGES):]
    m = re.fullmatch(r"k8s\.io/api/([a-z0-9]+)/(v[a-z0-9]+)", path)
    if not m:
        return None
    group, version = m.groups()
    if group == "core":
        return version
    return f"{group}/{version}" if group in ("apps", "batch", "policy") else f"{group}.k8s.io/{version}"


def kube_json(value, where=""):
    """A Go value of the Kubernetes or Gateway API types as its JSON:
    field names by json_field_name, `ObjectMeta` as `metadata`, embedded
    structs inlined, nil pointers left out. Raises GoError at a run-time
    value."""
    if isinstance(value, (FieldRef, Each)):
        return value.json()
    if isinstance(value, Predicate):
        return value.value
    if isinstance(value, KubeObject):
        return value.value
    if isinstance(value, (Unresolved, Fetched, Mutation)):
        raise GoError(f"{where or 'the value'}: {value.text} is computed at run time")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None:
                continue
            if k.startswith(INLINE):
                inner = kube_json(v, where)
                if not isinstance(inner, dict):
                    raise GoError(f"{where}: embedded {k[len(INLINE):]} is not a struct")
                out.update(inner)
            elif k == "ObjectMeta":
                out["metadata"] = kube_json(v, f"{where}.metadata")
            else:
                name = json_field_name(k) if re.fullmatch(r"[A-Z][A-Za-z0-9]*", k) else k
                out[name] = kube_json(v, f"{where}.{name}")
        return out
    if isinstance(value, list):
        return [kube_json(v, f"{where}[{n}]") for n, v in enumerate(value)]
    if isinstance(value, (GatewayAddress, TLSSecretPart, RouteHostnames)):
        raise GoError(f"{where}: a value known only at run time")
    return value


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

    def struct_zero_values(self, start, end):
        """For `[]struct{a string; b int}` between start and end: the
        fields' zero values ({"a": "", "b": 0}); else None."""
        if not (self.peek(start)[1] == "[" and self.peek(start + 1)[1] == "]" and self.peek(start + 2)[1] == "struct"):
            return None
        zero = {}
        names = []
        k = start + 4
        while k < end - 1:
            kind, tok = self.peek(k)
            if tok == "(":
                # A func type's parameters and results: no fields.
                k = self.skip_parens(k)
                continue
            if kind == "ident" and self.peek(k + 1)[1] == ",":
                names.append(tok)
                k += 2
                continue
            if kind == "ident" and self.peek(k + 1)[0] == "ident":
                names.append(tok)
                type_name = self.peek(k + 1)[1]
                value = "" if type_name == "string" else 0 if type_name.startswith(("int", "uint", "float")) else False if type_name == "bool" else None
                for name in names:
                    zero[name] = value
                names = []
                k += 2
                continue
            k += 1
        return zero

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

    def composite(self, i, elided_keys, own=None, element=None):
        """`{...}` after a type; keyed elements become a dict, others a list.
        `own` is the literal's struct type and `element` its elements' (for
        a slice or map), as keys of STRUCT_ZERO_VALUES, when known."""
        i = self.expect(i, "{")
        items = []
        keyed = {}
        while self.peek(i)[1] != "}":
            if self.peek(i)[1] == "{":
                value, i = self.composite(i, elided_keys, own=element)
                items.append(value)
            else:
                start = i
                value, i = self.expr(i)
                if self.peek(i)[1] == ":":
                    key = value
                    if self.peek(start)[0] == "ident" and i == start + 1:
                        key = self.peek(start)[1]  # a field name
                        if self.embedded(i + 1, key):
                            key = INLINE + key
                    if self.peek(i + 1)[1] == "{":
                        value, i = self.composite(i + 1, elided_keys, own=element)
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
        if own in STRUCT_ZERO_VALUES and not items:
            return struct_value(own, keyed), i
        return (keyed if keyed else items), i

    def field_pointer(self, fields, i):
        """The JSON pointer of a Go field path (`Spec.Rules`, then `[0]`,
        `["ca.crt"]`, `.BackendRefs` from token i on): (pointer, the index
        after it). Raises GoError at an index it cannot evaluate."""
        parts = [json_field_name(f) for f in fields.split(".")]
        while True:
            if self.peek(i)[1] == "[":
                index, j = self.expr(i + 1)
                if not isinstance(index, (str, int)) or isinstance(index, bool):
                    raise GoError(f"index {self.text(i, j + 1)} is not a known key")
                parts.append(str(index))
                i = self.expect(j, "]")
            elif self.peek(i)[1] == "." and self.peek(i + 1)[0] == "ident" and self.peek(i + 2)[1] not in ("(",):
                parts.append(json_field_name(self.peek(i + 1)[1]))
                i += 2
            else:
                break
        return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts), i

    def embedded(self, k, field):
        """Whether the value at k is `pkg.<field>{...}` of a Kubernetes or
        Gateway API package: an embedded struct, whose fields Kubernetes'
        JSON inlines. (Go writes an embedded field by its type's name; a
        field named like its type, `AllowedRoutes: &v1.AllowedRoutes{}`, is
        a pointer in these APIs, and an embedded one never is.)"""
        if not (self.peek(k)[0] == "ident" and self.peek(k + 1)[1] == "." and self.peek(k + 2)[1] == field and self.peek(k + 3)[1] == "{"):
            return False
        path = import_path(self.env, self.peek(k)[1]) or ""
        return path.startswith(GATEWAY_API_PACKAGES) or path.startswith("k8s.io/api/")

    def struct_key(self, start, end):
        """The STRUCT_ZERO_VALUES key of the type spelled by the tokens
        start..end (`v1.ListenerStatus`, `[]metav1.Condition`: its element),
        or None."""
        k = end - 1
        if k < start or self.peek(k)[0] != "ident":
            return None
        name = self.peek(k)[1]
        if k - 2 < start or self.peek(k - 1)[1] != "." or self.peek(k - 2)[0] != "ident":
            return None
        path = import_path(self.env, self.peek(k - 2)[1])
        if path and path.startswith(GATEWAY_API_PACKAGES):
            path = GATEWAY_API_PACKAGES
        return (path, name) if (path, name) in STRUCT_ZERO_VALUES else None

    def call_values(self, paren):
        """The evaluated arguments of the call whose `(` is at `paren`, a
        trailing `x...` spread into its elements; None when one is not a
        plain expression."""
        values = []
        for a, b in call_args(self.t, paren):
            spread = self.peek(b - 1)[1] == "..."
            value, j = self.expr(a)
            if j != (b - 1 if spread else b):
                return None
            if spread:
                if not isinstance(value, list):
                    return None
                values.extend(value)
            else:
                values.append(value)
        return values

    def kubernetes_call(self, func, start, paren, end):
        """The references the conformance `kubernetes` package builds
        (`NewGatewayRef`, `NewResourceRef`) as data; any other call is a
        run-time value."""
        try:
            values = self.call_values(paren)
        except GoError:
            values = None
        if func == "NewGatewayRef" and values and isinstance(values[0], dict):
            nn = values[0]
            return {"Name": nn.get("Name", ""), "Namespace": nn.get("Namespace", ""), "Listeners": values[1:]}, end
        if func == "NewResourceRef" and values and len(values) >= 2 and isinstance(values[1], dict):
            nn = values[1]
            return {
                "Name": nn.get("Name", ""),
                "Namespace": nn.get("Namespace", ""),
                "GroupKind": values[0],
                "ListenerNames": values[2:],
            }, end
        return Unresolved(self.text(start, end)), end

    def package_call(self, name, start, paren, end):
        """A call of a function of the test package (see function_value)."""
        tokens, params, body, body_end, imports = self.env[PACKAGE]["funcs"][name]
        return self.function_value(tokens, params, body, body_end, {IMPORTS: imports, PACKAGE: self.env[PACKAGE]}, start, paren, end)

    def function_value(self, tokens, params, body, body_end, scope, start, paren, end):
        """A call of a function whose body only binds names (`var (...)`,
        `x := ...`) and returns a value: that value, its parameters bound to
        the arguments in `scope` (the package's, or a local function's
        enclosing values); else a run-time value."""
        try:
            args = self.call_values(paren)
        except GoError:
            args = None
        if args is None or len(args) != len(params):
            return Unresolved(self.text(start, end)), end
        env = {**scope, **dict(zip(params, args))}
        r = Reader(tokens, env)
        i = body + 1
        try:
            while i < body_end - 1:
                tok = tokens[i][1]
                if tok == "return":
                    value, _ = r.expr(i + 1)
                    return value, end
                if tok == "var":
                    group = tokens[i + 1][1] == "("
                    i += 1 + group
                    while tokens[i][0] == "ident" and tokens[i + 1][1] == "=":
                        var = tokens[i][1]
                        env[var], i = r.expr(i + 2)
                        if not group:
                            break
                    if group:
                        i = r.expect(i, ")")
                    continue
                if tokens[i][0] == "ident" and tokens[i + 1][1] == ":=":
                    var = tokens[i][1]
                    env[var], i = r.expr(i + 2)
                    continue
                break
        except GoError:
            pass
        return Unresolved(self.text(start, end)), end

    def expr(self, i):
        value, i = self.unary(i)
        while self.peek(i)[1] in ("+", "-"):
            op = self.peek(i)[1]
            right, i = self.unary(i + 1)
            if op == "+" and isinstance(value, str) and isinstance(right, str):
                value = value + right
            elif isinstance(value, int) and isinstance(right, int) and not isinstance(value, bool):
                value = value + right if op == "+" else value - right
            elif op == "+" and is_text(value) and is_text(right):
                value = Template([value, right])
            else:
                value = Unresolved(f"{value!r} {op} {right!r}")
        return value, i

    def unary(self, i):
        kind, tok = self.peek(i)
        if tok == "&":
            return self.unary(i + 1)
        if tok == "!":
            value, j = self.unary(i + 1)
            if isinstance(value, bool):
                return not value, j
            if isinstance(value, Predicate):
                return Predicate({"Not": value.value}, "!" + value.text), j
            return Unresolved(self.text(i, j)), j
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
            value, end = self.composite(j, True, element=self.struct_key(i, j))
            zero = self.struct_zero_values(i, j)
            if zero and isinstance(value, list):
                # Go fills the fields an element leaves out with zero values.
                value = [{**zero, **v} if isinstance(v, dict) else v for v in value]
            return value, end
        if tok == "(" and self.peek(i + 1)[1] == "*":
            # `(*v1.Group)(&v1.GroupVersion.Group)`: a pointer conversion
            # keeps the pointed-to value.
            j = self.expect(self.skip_type(i + 1), ")")
            if self.peek(j)[1] == "(":
                v, k = self.expr(j + 1)
                return v, self.expect(k, ")")
            raise GoError(f"a type where a value was expected: {self.text(i, j)}")
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
        if name == "ptr.To" and nxt == "[":
            # `ptr.To[v1.Hostname]("foo.com")`: the explicit type argument
            # changes nothing of the value.
            k = self.expect(self.skip_type(i + 1), "]")
            if self.peek(k)[1] == "(":
                value, j = self.expr(k + 1)
                return value, self.expect(j, ")")
        head, _, rest = name.partition(".")
        # A local variable hides an import of the same name.
        path = import_path(self.env, head) if rest and head not in self.env else None
        if nxt == "{" and (name.split(".")[-1][0].isupper() or name in self.env.get(LOCAL_TYPES, ())):
            key = self.struct_key(start, i)
            value, j = self.composite(i, True, own=key)
            if path and path.startswith(GATEWAY_API_PACKAGES) and key is None and value in ([], {}) and "." not in rest:
                # `&gatewayv1.HTTPRoute{}`: an empty object of a Gateway API
                # kind stands for its kind (the helpers' `routeType`).
                return {"Kind": rest}, j
            if path and path.startswith("k8s.io/api/") and value in ([], {}) and "." not in rest:
                # `&corev1.ConfigMap{}`, to be filled by `Client.Get`.
                return {"Kind": rest}, j
            if path and api_version(path) and isinstance(value, dict) and "ObjectMeta" in value and "." not in rest:
                # An object the test writes (`Applier`, `Client.Create`).
                try:
                    return KubeObject({"apiVersion": api_version(path), "kind": rest, **kube_json(value)}, self.text(start, j)), j
                except GoError as e:
                    return Unresolved(f"{self.text(start, i)}{{...}} ({e})"), j
            if path == URL_PACKAGE and rest == "Values" and isinstance(value, dict):
                return UrlValues(value), j
            return value, j
        if nxt == "(":
            end = self.skip_parens(i)
            args_start = i + 1
            special = code_value(self, name, head, rest, path, start, i, end)
            if special is not None:
                return special
            if rest == "DeepCopy" and end == i + 2 and isinstance(self.env.get(head), Fetched):
                return Mutation(self.env[head], self.text(start, end)), end
            if isinstance(self.env.get(head), Each) and re.fullmatch(r"Get[A-Z][A-Za-z]*", rest) and end == i + 2:
                # `pod.GetName()`: ObjectMeta's getters read metadata.
                each = self.env[head]
                return EachRef(each.var, f"{each.path}/metadata/{json_field_name(rest[3:])}"), end
            method = walk_fields(self.env.get(head), rest.split(".")) if rest and head in self.env else self.env.get(name)
            if isinstance(method, GoMethod):
                # `ipFamily.isMember(ip)`, `family(ip)`: a method expression
                # called.
                try:
                    args = self.call_values(i)
                except GoError:
                    args = None
                if args is None:
                    return Unresolved(self.text(start, end)), end
                return Predicate({"Func": method.name, "Args": [kube_json(a, method.name) for a in args]}, self.text(start, end)), end
            if (path, rest) in IDENTITY_CALLS:
                try:
                    value, j = self.expr(args_start)
                    if j == end - 1:
                        return value, end
                except GoError:
                    pass
                return Unresolved(self.text(start, end)), end
            if path == KUBERNETES_PACKAGE:
                return self.kubernetes_call(rest, start, i, end)
            if not rest and name not in self.env and name in self.env.get(PACKAGE, {}).get("funcs", {}):
                return self.package_call(name, start, i, end)
            if not rest and isinstance(self.env.get(name), LocalFunction):
                func = self.env[name]
                return self.function_value(func.tokens, func.params, func.body, func.body_end, self.env, start, i, end)
            if not rest and name in BUILTINS:
                try:
                    values = self.call_values(args_start - 1) if name != "make" else []
                except GoError:
                    values = None
                if values is not None:
                    value = BUILTINS[name](self.text(args_start, end - 1), values)
                    if value is not None:
                        return value, end
                return Unresolved(self.text(start, end)), end
            if path in LIBRARY and rest in LIBRARY[path]:
                try:
                    values = self.call_values(args_start - 1)
                except GoError:
                    values = None
                value = LIBRARY[path][rest](values) if values is not None and all(json_value(v) for v in values) else None
                if value is not None:
                    return value, end
                return Unresolved(self.text(start, end)), end
            if name == "new":
                # Go 1.26's `new(expr)`: a pointer to the value.
                try:
                    value, j = self.expr(args_start)
                    if j == end - 1:
                        return value, end
                except GoError:
                    pass
                return Unresolved(self.text(start, end)), end
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
        if rest and isinstance(self.env.get(head), Each):
            pointer, j = self.field_pointer(rest, i)
            return EachRef(self.env[head].var, self.env[head].path + pointer), j
        if rest == "Items" and isinstance(self.env.get(head), Listed):
            return RunList(self.env[head], self.text(start, i)), i
        if path == "net/netip" and re.fullmatch(r"Addr\.[A-Z][A-Za-z0-9]*", rest or ""):
            # `netip.Addr.Is4`: a method expression, a function value.
            return GoMethod(name), i
        if rest and isinstance(self.env.get(head), Fetched):
            pointer, j = self.field_pointer(rest, i)
            if self.env[head].after_change:
                return Unresolved(f"{self.text(start, j)} (read after a change)"), j
            return FieldRef(self.env[head], pointer, self.text(start, j)), j
        if name in ("true", "false"):
            return name == "true", i
        if name == "nil":
            return None, i
        if name in SUITE_CONSTANTS:
            return SUITE_CONSTANTS[name], i
        if path == SUITE_PACKAGE and f"confsuite.{rest}" in SUITE_CONSTANTS:
            return SUITE_CONSTANTS[f"confsuite.{rest}"], i
        if rest and "." not in rest and head not in self.env and head == self.env.get(SUITE_PARAM):
            # `suite.ControllerName`: a value of the suite the runner is.
            return {"Suite": rest}, i
        if path and path.startswith(GATEWAY_API_PACKAGES):
            value = gateway_api_constant(rest)
            if value is not None:
                return value, i
        if path == METAV1_PACKAGE and rest in METAV1_CONSTANTS:
            return METAV1_CONSTANTS[rest], i
        if not rest and name not in self.env:
            found, value = package_value(self.env, name)
            if found:
                return value, i
        if name.count(".") == 1 and name.split(".")[0] in SYMBOL_PACKAGES:
            return name, i
        if path == DNS_PACKAGE and rest.startswith("Type") and len(rest) > 4:
            return rest[4:], i
        head, _, field = name.partition(".")
        if field and "." not in field and isinstance(self.env.get(head), dict) and field in self.env[head]:
            return self.index(self.env[head][field], i)
        if "." in name and head in self.env and walk_fields(self.env[head], name.split(".")[1:]) is not None:
            return self.index(walk_fields(self.env[head], name.split(".")[1:]), i)
        if name in self.env:
            value = self.env[name]
            if (
                isinstance(value, RouteHostnames)
                and nxt == "["
                and self.peek(i + 1)[0] == "num"
                and self.peek(i + 2)[1] == "]"
            ):
                index = int(self.peek(i + 1)[1])
                return {"RouteHostname": {"Routes": value.routes, "Index": index}}, i + 3
            return self.index(value, i)
        return Unresolved(name), i


def import_path(env, name):
    """The import path a file's name `name` stands for (a snippet without
    imports gets the usual names of the upstream tests)."""
    return env.get(IMPORTS, {}).get(name) or DEFAULT_IMPORTS.get(name)


DEFAULT_IMPORTS = {
    "confsuite": SUITE_PACKAGE,
    "kubernetes": KUBERNETES_PACKAGE,
    "metav1": METAV1_PACKAGE,
    "gatewayv1": GATEWAY_API_PACKAGES + "v1",
    "v1": GATEWAY_API_PACKAGES + "v1",
    "types": "k8s.io/apimachinery/pkg/types",
    "schema": "k8s.io/apimachinery/pkg/runtime/schema",
}


def go_sprintf(values):
    """`fmt.Sprintf` for the verbs the tests use with known values: `%s`,
    `%d`, `%v`, `%q` and `%%`; None for anything else."""
    if not values or not isinstance(values[0], str):
        return None
    args = list(values[1:])
    out = []
    parts = re.split(r"(%[%sdvq])", values[0])
    for part in parts:
        if part == "%%":
            out.append("%")
        elif part in ("%s", "%d", "%v", "%q"):
            if not args:
                return None
            v = args.pop(0)
            if part == "%d" and not (isinstance(v, int) and not isinstance(v, bool)):
                return None
            if part in ("%s", "%q") and not isinstance(v, str):
                return None
            if part == "%v" and not isinstance(v, (str, int)):
                return None
            if isinstance(v, bool):
                v = "true" if v else "false"
            out.append(json.dumps(v) if part == "%q" else str(v))
        elif "%" in part:
            return None
        else:
            out.append(part)
    return "".join(out) if not args else None


def join_host_port(values):
    """`net.JoinHostPort` of a known host and port (IPv6 in brackets)."""
    if len(values) != 2 or not all(isinstance(v, str) for v in values):
        return None
    host, port = values
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# Functions of the standard library evaluated when every argument is known.
LIBRARY = {
    "fmt": {"Sprintf": go_sprintf},
    "net": {"JoinHostPort": join_host_port},
    "strings": {
        "Repeat": lambda v: v[0] * v[1] if len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], int) and v[1] >= 0 else None,
        "ToLower": lambda v: v[0].lower() if len(v) == 1 and isinstance(v[0], str) else None,
        "Join": lambda v: v[1].join(v[0]) if len(v) == 2 and isinstance(v[0], list) and all(isinstance(x, str) for x in v[0]) and isinstance(v[1], str) else None,
    },
}
DEFAULT_IMPORTS.update({name: name for name in LIBRARY})


def go_append(text, values):
    if not values or not isinstance(values[0], list):
        return None
    return values[0] + values[1:]


# Go's builtins over known values: `make` of a slice or map is empty,
# `append` (a spread `x...` is already expanded by the reader), `len`.
BUILTINS = {
    "make": lambda text, values: {} if text.startswith("map") else [] if text.startswith("[") else None,
    "append": go_append,
    "len": lambda text, values: len(values[0]) if len(values) == 1 and isinstance(values[0], (str, list, dict)) else None,
}


def struct_value(key, keyed):
    """A struct literal of a known type with Go's zero values for the fields
    it leaves out."""
    out = {**STRUCT_ZERO_VALUES[key], **keyed}
    for field, sub in STRUCT_FIELD_TYPES.items():
        if isinstance(out.get(field), dict):
            out[field] = struct_value(sub, out[field])
    return out


def gateway_api_constant(name):
    """The string value of a Gateway API constant by the API's naming rule,
    or None for a name the rule does not read."""
    if name in GATEWAY_API_CONSTANTS:
        return GATEWAY_API_CONSTANTS[name]
    m = re.fullmatch(r"(?:%s)(?:Condition|Reason)([A-Z][A-Za-z0-9]*)" % "|".join(CONDITION_KINDS), name)
    # `GatewayConditionReason`, `RouteConditionType`: types, not values.
    if m and m.group(1) not in ("Type", "Reason"):
        return m.group(1)
    m = re.fullmatch(r"([A-Z][A-Z0-9]*)ProtocolType", name)
    if m:
        return m.group(1)
    # `NamespacesFromAll`: `allowedRoutes.namespaces.from`.
    m = re.fullmatch(r"NamespacesFrom([A-Z][A-Za-z]*)", name)
    if m:
        return m.group(1)
    return None


def read_imports(tokens):
    """A file's imports: the name each is used by -> its path."""
    out = {}
    i = 0
    while i < len(tokens):
        if tokens[i][1] == "import":
            j = i + 1
            group = tokens[j][1] == "("
            j += group
            while j < len(tokens):
                alias = None
                if tokens[j][0] == "ident" or tokens[j][1] == ".":
                    alias = tokens[j][1]
                    j += 1
                if tokens[j][0] != "str":
                    break
                path = json.loads(tokens[j][1])
                out[alias or path.rsplit("/", 1)[-1]] = path
                j += 1
                if not group:
                    break
                if tokens[j][1] == ")":
                    break
            i = j
        elif tokens[i][1] in ("func", "var", "const", "type"):
            break
        i += 1
    return out


HELPERS_PATH = "sigs.k8s.io/gateway-api/conformance/utils/"


def canonical_helper_packages(tokens, imports):
    """The tokens with the conformance helper packages under their own
    names: a file that imports `h "sigs.k8s.io/gateway-api/conformance/utils/http"`
    writes `h.ExpectedResponse{...}` and `h.MakeRequest...(...)`, which are
    read as `http.`'s."""
    renamed = {
        alias: path.rsplit("/", 1)[-1]
        for alias, path in imports.items()
        if path.startswith(HELPERS_PATH) and path.rsplit("/", 1)[-1] in HELPER_PACKAGES and alias != path.rsplit("/", 1)[-1]
    }
    if not renamed:
        return tokens
    return [
        (kind, renamed[tok])
        if kind == "ident" and tok in renamed and n + 1 < len(tokens) and tokens[n + 1][1] == "." and (n == 0 or tokens[n - 1][1] != ".")
        else (kind, tok)
        for n, (kind, tok) in enumerate(tokens)
    ]


def load_package(files):
    """The top-level `const`/`var` values and functions of the test
    package (`files`: (tokens, imports) per file). Values are read twice,
    so one may name another declared in a later file."""
    package = {"values": {}, "funcs": {}}
    for _ in range(2):
        for tokens, imports in files:
            env = {IMPORTS: imports, PACKAGE: package}
            r = Reader(tokens, env)
            depth, i = 0, 0
            while i < len(tokens):
                tok = tokens[i][1]
                if tok in ("{", "(", "["):
                    depth += 1
                elif tok in ("}", ")", "]"):
                    depth -= 1
                elif depth == 0 and tok == "func" and tokens[i + 1][0] == "ident" and tokens[i + 2][1] == "(":
                    params = [tokens[a][1] for a, b in call_args(tokens, i + 2)]
                    k = r.skip_parens(i + 2)
                    while tokens[k][1] != "{":
                        k += 1
                    end = r.skip_braces(k)
                    package["funcs"][tokens[i + 1][1]] = (tokens, params, k, end, imports)
                    i = end
                    continue
                elif depth == 0 and tok in ("var", "const"):
                    group = tokens[i + 1][1] == "("
                    j = i + 1 + group
                    try:
                        while tokens[j][0] == "ident":
                            name = tokens[j][1]
                            if tokens[j + 1][1] != "=":
                                raise GoError(f"{name}: a declaration without a value")
                            value, j = r.expr(j + 2)
                            package["values"][name] = value
                            if not group:
                                break
                    except GoError:
                        pass
                i += 1
    return package


class LocalFunction:
    """A function literal assigned to a local name: its parameters and
    body (token indices)."""

    def __init__(self, tokens, params, body, body_end):
        self.tokens = tokens
        self.params = params
        self.body = body
        self.body_end = body_end


def package_changes(env, name):
    """For a function of the test package that calls its client's
    `Create`/`Update`/`Delete`/`Patch`: `client.Patch` (what it calls);
    else None."""
    funcs = env.get(PACKAGE, {}).get("funcs", {})
    if name not in funcs:
        return None
    tokens, params, body, body_end, _ = funcs[name]
    for k in range(body, body_end - 3):
        if tokens[k + 1][1] == "." and tokens[k + 2][1] in STATE_CHANGES and tokens[k + 3][1] == "(" and tokens[k][1] in params:
            return f"{tokens[k][1]}.{tokens[k + 2][1]}"
    return None


def package_value(env, name):
    """(True, value) for a top-level value of the test package, else
    (False, None)."""
    values = env.get(PACKAGE, {}).get("values", {})
    return (True, values[name]) if name in values else (False, None)


def unresolved_in(value, path=""):
    """The first run-time value inside `value`, with its field path."""
    if isinstance(value, (Unresolved, *RUNTIME_VALUES)):
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
    """`var NAME = confsuite.ConformanceTest{...}` (or `suite.`): name ->
    (literal range)."""
    out = {}
    for i in range(len(tokens) - 6):
        if (
            tokens[i][1] == "var"
            and tokens[i + 2][1] == "="
            # The suite package under any import name (`confsuite`, `suite`).
            and tokens[i + 3][0] == "ident"
            and tokens[i + 4][1] == "."
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


def suite_parameter(tokens, func):
    """The name a Test function literal gives the suite (`s` in
    `func(t *testing.T, s *confsuite.ConformanceTestSuite)`)."""
    k = func
    while tokens[k][1] != "{":
        if tokens[k][1] == "ConformanceTestSuite" and tokens[k - 3][1] == "*" and tokens[k - 4][0] == "ident":
            return tokens[k - 4][1]
        k += 1
    return None


def returns_when(tokens, func, suite):
    """The early returns at the top level of a Test body that depend only on
    the implementation's features: `if suite.SupportedFeatures.Has(features.X)
    { ... return }` is `{"has": "X"}`, its `!` form `{"lacks": "X"}`. Upstream
    runs nothing of such a test when the condition holds and reports it
    passed, so the runner judges the condition against the features it claims."""
    i = func
    while tokens[i][1] != "{":
        i += 1
    out = []
    depth = 0
    k = i
    while True:
        tok = tokens[k][1]
        if tok in ("{", "(", "["):
            depth += 1
        elif tok in ("}", ")", "]"):
            depth -= 1
            if depth == 0:
                return out
        elif depth == 1 and tok == "if" and suite:
            j = k + 1
            negated = tokens[j][1] == "!"
            j += negated
            words = [t[1] for t in tokens[j:j + 11]]
            if (
                words[:6] == [suite, ".", "SupportedFeatures", ".", "Has", "("]
                and words[7] == "."
                and words[9:11] == [")", "{"]
            ):
                block_end = j + 10
                inner = 1
                returns = False
                while inner:
                    block_end += 1
                    t = tokens[block_end][1]
                    inner += {"{": 1, "}": -1}.get(t, 0)
                    returns = returns or (inner == 1 and t == "return")
                if returns:
                    out.append({"lacks" if negated else "has": words[8]})
        k += 1


def symbol(value):
    """`features.SupportHTTPRoute` -> `SupportHTTPRoute` (a name, kept)."""
    if isinstance(value, Unresolved):
        return value.text.split(".")[-1]
    return value


STATE_CHANGES = ("Delete", "Update", "Create", "Patch")
# The names the tests give a controller-runtime client (`suite.Client`,
# a helper's `c client.Client` or `klient`).
CLIENT_NAMES = re.compile(r"Client|client|klient|c|cl|cli|[a-z]+Client")


def is_client(tokens, i):
    """Whether token i is a client receiver: `X.Client.` or a client name
    not qualified by anything (`c.Patch(`)."""
    tok = tokens[i][1]
    if tokens[i + 1][1] != ".":
        return False
    if tok == "Client":
        return tokens[i - 1][1] == "."
    return tokens[i][0] == "ident" and tokens[i - 1][1] != "." and bool(CLIENT_NAMES.fullmatch(tok))


def fetched(declared, tokens, args, env, text):
    """The value `Client.Get(ctx, nn, obj)` leaves in `obj`: a Fetched of
    the kind `obj` was declared with (`&v1.Gateway{}`, or an earlier
    Fetched), when the name is known; else a run-time value."""
    kind = declared.get("Kind") if isinstance(declared, dict) else declared.kind if isinstance(declared, Fetched) else None
    try:
        nn, j = Reader(tokens, env).expr(args[1][0])
    except GoError:
        return Unresolved(text)
    if not kind or j != args[1][1] or not isinstance(nn, dict) or unresolved_in(nn):
        return Unresolved(text)
    return Fetched(kind, {"Name": nn.get("Name", ""), "Namespace": nn.get("Namespace", "")}, text)


def listed(declared, tokens, args, env, text):
    """The value `Client.List(ctx, list, opts...)` leaves in `list`: a
    Listed of the kind `list` was declared with (`&corev1.PodList{}`: Pod),
    in the namespace of `client.InNamespace(ns)`, matching the labels of
    `client.MatchingLabelsSelector{Selector: s}` (a LabelSelector, as
    `metav1.LabelSelectorAsSelector` was given it) or
    `client.MatchingLabels{...}`; a run-time value when an option is
    another or a value is not known."""
    kind = declared.get("Kind") if isinstance(declared, dict) else None
    if not kind or not kind.endswith("List") or len(kind) == 4:
        return Unresolved(text)
    r = Reader(tokens, env)
    namespace, selector = "", {}
    for a, b in args[2:]:
        option = "".join(tok for _, tok in tokens[a:a + 4])
        try:
            if option == "client.InNamespace(":
                value, j = r.expr(a + 4)
                if j != b - 1 or not isinstance(value, str):
                    return Unresolved(text)
                namespace = value
            elif option == "client.MatchingLabelsSelector{":
                value, j = r.expr(a)
                if j != b or not isinstance(value, dict) or set(value) != {"Selector"}:
                    return Unresolved(text)
                selector = value["Selector"]
            elif option == "client.MatchingLabels{":
                value, j = r.expr(a)
                if j != b or not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                    return Unresolved(text)
                selector = {"MatchLabels": value}
            else:
                return Unresolved(text)
        except GoError:
            return Unresolved(text)
    if isinstance(selector, Unresolved) or (not isinstance(selector, FieldRef) and unresolved_in(selector)):
        return Unresolved(text)
    return Listed(kind[:-4], namespace, selector, text)


def merge_base(tokens, i, env):
    """At `patch := client.MergeFrom(obj.DeepCopy())`, `obj` a Fetched: the
    index after it, `obj` made the Mutation its later assignments change
    and `patch` its MergeBase; else None."""
    t = [tok for _, tok in tokens[i:i + 12]]
    if len(t) < 12 or t[1] != ":=" or t[2:6] != ["client", ".", "MergeFrom", "("] or t[7:12] != [".", "DeepCopy", "(", ")", ")"]:
        return None
    if tokens[i][0] != "ident" or not isinstance(env.get(t[6]), Fetched):
        return None
    mutation = Mutation(env[t[6]], t[6])
    env[t[6]] = mutation
    env[t[0]] = MergeBase(mutation, "".join(t[2:12]))
    return i + 12


def guard_statement(tokens, i, env):
    """At `if len(obj.F) == 0 { continue }`, `obj` a Mutation: the index
    after it, the rest of the loop body (its changes) made under the
    condition that the patched object's list is not empty; else None."""
    if tokens[i][1] != "if" or tokens[i + 1][1] != "len" or tokens[i + 2][1] != "(":
        return None
    head = tokens[i + 3][1]
    if not isinstance(env.get(head), Mutation) or tokens[i + 4][1] != "." or tokens[i + 5][0] != "ident":
        return None
    r = Reader(tokens, env)
    try:
        pointer, j = r.field_pointer(tokens[i + 5][1], i + 6)
    except GoError:
        return None
    if [tok for _, tok in tokens[j:j + 7]] != [")", "==", "0", "{", "continue", "}", tokens[j + 6][1]] or tokens[j + 5][1] != "}":
        return None
    env[GUARD] = (env[head], {"NotEmpty": pointer}, r.text(i + 1, j + 3) + " is false")
    return j + 6


def each_loop(tokens, i, env):
    """At `for _, v := range X {` over a list known only at run time (a
    RunList such as `pods.Items`) whose body appends to a Mutation's list
    (`obj.F = append(obj.F, value)`): the index after the loop, the append
    recorded as one patch operation `{"op": "add", "path": F/-, "forEach",
    "where", "value"}` (or why it is not, as the Mutation's problem); else
    None. See each_body."""
    if not (
        tokens[i][1] == "for" and tokens[i + 1][0] == "ident" and tokens[i + 2][1] == ","
        and tokens[i + 3][0] == "ident" and tokens[i + 4][1] == ":=" and tokens[i + 5][1] == "range"
    ):
        return None
    r = Reader(tokens, env)
    try:
        values, j = range_value(tokens, i + 6, env)
    except GoError:
        return None
    if not isinstance(values, RunList) or tokens[j][1] != "{":
        return None
    body_end = r.skip_braces(j)
    mutation = next(
        (env[tokens[k][1]] for k in range(j, body_end - 3)
         if isinstance(env.get(tokens[k][1]), Mutation) and tokens[k - 1][1] != "." and tokens[k + 1][1] == "."),
        None,
    )
    if mutation is None:
        return None
    var = tokens[i + 3][1]
    for_each = [{"Each": var, "In": values.listed.json()}]
    try:
        each_body(tokens, j + 1, body_end - 1, {**env, var: Each(var)}, for_each, [], mutation)
    except GoError as e:
        mutation.problem = mutation.problem or f"{r.text(i, j)} {{...}}: {e}"
    return body_end


def range_value(tokens, i, env):
    """The value of a `range` clause's expression from token i, which ends
    at the loop body's `{` (Go reads `range pods.Items {` so, not as a
    composite literal): (value, the index of the `{`)."""
    depth, k = 0, i
    while k < len(tokens) and not (depth == 0 and tokens[k][1] == "{"):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(tokens[k][1], 0)
        k += 1
    value, j = Reader(tokens[:k] + [("eof", "")] * 8, env).expr(i)
    if j != k:
        raise GoError(f"{Reader(tokens, env).text(i, k)} is not a value the reader evaluates")
    return value, k


def each_body(tokens, start, end, env, for_each, where, mutation):
    """The statements of a loop over run-time values, the only ones read
    there: `x := v` / `x, err := v` (a value, the first name bound),
    `if P { continue }` (the elements where P holds are skipped: a
    `where` of `!P`), a nested `for _, w := range <a field of an element>
    {...}`, calls of `require`/`assert` (judgements of the test's own
    values, nothing the data carries), and `obj.F = append(obj.F, value)`
    of the Mutation: an operation adding `value` for every combination of
    elements that passes every `where`. Raises GoError at anything else."""
    r = Reader(tokens, env)
    i = start
    while i < end:
        t = [tok for _, tok in tokens[i:i + 6]]
        if t[0] == "for" and tokens[i + 1][0] == "ident" and t[2] == "," and t[4] == ":=" and t[5] == "range":
            values, j = range_value(tokens, i + 6, env)
            if not isinstance(values, (RunList, EachRef)) or tokens[j][1] != "{":
                raise GoError(f"a loop over {r.text(i + 6, j)}, which is not a run-time list")
            body_end = r.skip_braces(j)
            source = values.listed.json() if isinstance(values, RunList) else values.json()
            var = t[3]
            each_body(tokens, j + 1, body_end - 1, {**env, var: Each(var)}, for_each + [{"Each": var, "In": source}], list(where), mutation)
            i = body_end
            continue
        if t[0] == "if":
            cond, j = r.expr(i + 1)
            if [tok for _, tok in tokens[j:j + 3]] != ["{", "continue", "}"]:
                raise GoError(f"if {r.text(i + 1, j)} {{...}} is not `{{ continue }}`")
            if not isinstance(cond, Predicate):
                raise GoError(f"{r.text(i + 1, j)} is not a condition the data writes")
            where.append({"Not": cond.value} if "Not" not in cond.value else cond.value["Not"])
            i = j + 3
            continue
        if t[0] in ("require", "assert") and t[1] == "." and t[3] == "(":
            i = r.skip_parens(i + 3)
            continue
        if tokens[i][0] == "ident" and t[1] in (":=", "="):
            if isinstance(env.get(t[0]), Mutation) or t[0] not in env and t[1] == "=":
                raise GoError(f"{t[0]} {t[1]} ... changes a value outside the loop")
            value, j = r.expr(i + 2)
            env[t[0]] = value
            i = j
            continue
        if tokens[i][0] == "ident" and t[1] == "," and t[3] in (":=", "="):
            value, j = r.expr(i + 4)
            env[t[0]] = value
            i = j
            continue
        if env.get(t[0]) is mutation and t[1] == ".":
            pointer, j = r.field_pointer(tokens[i + 2][1], i + 3)
            lhs = r.text(i, j)
            if tokens[j][1] != "=" or tokens[j + 1][1] != "append" or tokens[j + 2][1] != "(":
                raise GoError(f"{lhs} is changed other than by an append")
            args = call_args(tokens, j + 2)
            if len(args) != 2 or r.text(*args[0]) != lhs or tokens[args[1][1] - 1][1] == "...":
                raise GoError(f"{r.text(j + 1, r.skip_parens(j + 2))} is not an append of one value to {lhs}")
            value, k = r.expr(args[1][0])
            if k != args[1][1]:
                raise GoError(f"{r.text(*args[1])} is not a value the reader evaluates")
            found = unresolved_in(kube_json(value, pointer)) if not isinstance(value, Each) else None
            if found:
                raise GoError(f"{found[0]}: {found[1]} is computed at run time")
            op = {"op": "add", "path": pointer + "/-", "forEach": for_each, "value": kube_json(value, pointer)}
            if where:
                op["where"] = list(where)
            mutation.ops.append(op)
            i = r.skip_parens(j + 2)
            continue
        raise GoError(f"{r.text(i, min(i + 6, end))} ... is not read in a loop over run-time values")


def object_ref(value):
    """`{kind, namespace, name}` of a step's object."""
    return {"kind": value.kind, "namespace": value.nn.get("Namespace", ""), "name": value.nn.get("Name", "")}


def client_change(tokens, i, env):
    """`<client>.Patch/Delete/Update/Create(ctx, obj, ...)` at token i as a
    step: (step, None), or (None, why it is not read)."""
    method = tokens[i + 2][1]
    args = call_args(tokens, i + 3)
    r = Reader(tokens, env)
    if len(args) < 2:
        return None, "too few arguments"
    try:
        obj, j = r.expr(args[1][0])
    except GoError as e:
        return None, str(e)
    if j != args[1][1]:
        return None, f"{r.text(*args[1])} is not a value the reader evaluates"
    text = r.text(*args[1])
    guard = env.get(GUARD)
    if guard and not (method == "Patch" and guard[0] is obj):
        return None, f"made only when {guard[2]}, a condition on another object"
    if method in ("Patch", "Update") and isinstance(obj, Mutation):
        if method == "Patch":
            patch = r.text(*args[2]) if len(args) > 2 else ""
            base = patch.removeprefix("client.MergeFrom(").removesuffix(")")
            merged = env.get(patch) if len(args) > 2 and args[2][1] == args[2][0] + 1 else None
            if isinstance(merged, MergeBase):
                if merged.mutation is not obj:
                    return None, f"the patch {patch} is not client.MergeFrom of a copy of {text}"
            elif not patch.startswith("client.MergeFrom(") or not isinstance(env.get(base), Fetched) or env[base].nn != obj.fetched.nn:
                return None, f"the patch {patch} is not client.MergeFrom of the object {text} was copied from"
        if obj.problem:
            return None, obj.problem
        step = {"change": "patch", **object_ref(obj.fetched), "jsonPatch": obj.ops}
        if guard:
            step["when"] = guard[1]
        return step, None
    if method in ("Create", "Update") and isinstance(obj, KubeObject):
        return {"change": "apply", **object_ref(obj), "object": obj.value}, None
    if method == "Delete" and isinstance(obj, (KubeObject, Fetched)):
        return {"change": "delete", **object_ref(obj)}, None
    if isinstance(obj, Fetched):
        return None, f"{text} is changed by assignments the reader does not follow (not on a DeepCopy)"
    return None, f"{text} is not an object the reader knows"


def applier_change(tokens, i, env):
    """`suite.Applier.MustApplyObjectsWithCleanup(t, c, timeouts, objects,
    cleanup)` or `MustApplyWithCleanup(t, c, timeouts, "file", cleanup)`
    at token i as steps: (steps, None), or (None, why they are not read)."""
    args = call_args(tokens, i + 3)
    r = Reader(tokens, env)
    if len(args) < 4:
        return None, "too few arguments"
    try:
        value, j = r.expr(args[3][0])
    except GoError as e:
        return None, str(e)
    if j != args[3][1]:
        return None, f"{r.text(*args[3])} is not a value the reader evaluates"
    if isinstance(value, str):
        return [{"change": "apply", "manifest": value}], None
    if isinstance(value, list) and value and all(isinstance(v, KubeObject) for v in value):
        return [{"change": "apply", **object_ref(v), "object": v.value} for v in value], None
    found = unresolved_in(value)
    return None, f"{found[1] if found else r.text(*args[3])} is computed at run time"


def keep_loop(tokens, i, env):
    """At `for _, x := range mutate.F { if x.G == v { kept = append(kept,
    x) } }`, `mutate` a Mutation: (kept, KeepWhere, the index after the
    loop); else None."""
    t = [tok for _, tok in tokens[i:i + 9]]
    if len(t) < 9 or t[0] != "for" or t[2] != "," or t[4] != ":=" or t[5] != "range" or t[7] != ".":
        return None
    mutation = env.get(t[6])
    if not isinstance(mutation, Mutation) or tokens[i + 3][0] != "ident" or tokens[i + 8][0] != "ident":
        return None
    var = t[3]
    r = Reader(tokens, env)
    try:
        pointer, j = r.field_pointer(t[8], i + 9)
        if [tok for _, tok in tokens[j:j + 6]] != ["{", "if", var, ".", tokens[j + 4][1], "=="]:
            return None
        field = tokens[j + 4][1]
        value, k = r.expr(j + 6)
    except GoError:
        return None
    if not isinstance(value, (str, int)) or tokens[k][1] != "{":
        return None
    kept = tokens[k + 1][1]
    if [tok for _, tok in tokens[k + 1:k + 11]] != [kept, "=", "append", "(", kept, ",", var, ")", "}", "}"]:
        return None
    where = {json_field_name(field): value}
    return kept, KeepWhere(mutation, pointer, where, r.text(i, k + 11)), k + 11


def changed_before(obj, state):
    """Whether a change read so far may have changed `obj` (a Fetched):
    a step of the same object, a manifest applied (its objects are not
    known here), or a change the reader could not read."""
    if state["changed"]:
        return True
    for what, step in state["steps"]:
        if what != "change":
            continue
        if "manifest" in step:
            return True
        if (step.get("kind"), step.get("namespace"), step.get("name")) == (obj.kind, obj.nn.get("Namespace", ""), obj.nn.get("Name", "")):
            return True
    return False


def filter_function(env, name):
    """A function of the test package that only filters its first
    parameter, a list, by one member of its elements compared with its
    second parameter (or a member of it):

        func f(xs []T, filter T) (out []T) {
            for _, x := range xs { if x.G != filter.G { out = append(out, x) } }
            return out
        }

    (`==` keeps, `!=` drops; either side; `out` the named result or a
    `var out []T` first): (keeps, G, H or None), else None."""
    funcs = env.get(PACKAGE, {}).get("funcs", {})
    if name not in funcs:
        return None
    tokens, params, body, body_end, _ = funcs[name]
    if len(params) != 2:
        return None
    t = [tok for _, tok in tokens[body + 1:body_end - 1]]
    if t[:1] == ["var"]:
        # `var out []T`: the declaration ends where the loop starts.
        t = t[t.index("for"):] if "for" in t else []
    if len(t) < 12 or t[:3] != ["for", "_", ","] or t[4:7] != [":=", "range", params[0]] or t[7:9] != ["{", "if"]:
        return None
    var = t[3]
    k = 9
    # The comparison: `x.G OP p.H` / `x.G OP p`, or the other way round.
    op = next((n for n in range(k, min(k + 6, len(t))) if t[n] in ("==", "!=")), None)
    if op is None:
        return None
    sides = (t[k:op], t[op + 1:t.index("{", op)] if "{" in t[op:] else [])
    element = next((x for x in sides if len(x) == 3 and x[0] == var and x[1] == "."), None)
    other = next((x for x in sides if x is not element), None)
    if element is None or other is None or not other or other[0] != params[1]:
        return None
    if other not in ([params[1]], [params[1], ".", other[-1]]):
        return None
    member = other[2] if len(other) == 3 else None
    rest = t[t.index("{", op) + 1:]
    if len(rest) < 11:
        return None
    out = rest[0]
    if rest[:10] != [out, "=", "append", "(", out, ",", var, ")", "}", "}"]:
        return None
    if rest[10:] not in (["return"], ["return", out]):
        return None
    return t[op] == "==", element[2], member


def filter_call(tokens, rhs, env, mutation, pointer):
    """`mutate.F = f(original.F, v)` at `rhs`, `f` a filter_function and
    `original.F` the list the Mutation copies at the same path: the patch
    operation `{"op": "keep" | "drop", "path", "where": {g: value}}` and
    the index after the call, else None. The list filtered is the object's
    as it is when the patch is made (the runner applies the operation to
    it); the value compared is data or a FieldRef (an element the test
    read before its first change)."""
    if tokens[rhs][0] != "ident" or tokens[rhs + 1][1] != "(":
        return None
    shape = filter_function(env, tokens[rhs][1])
    if shape is None:
        return None
    keeps, member, other = shape
    args = call_args(tokens, rhs + 1)
    if len(args) != 2:
        return None
    r = Reader(tokens, env)
    (a, b), (c, d) = args
    head = tokens[a][1]
    source = env.get(head)
    if not isinstance(source, Fetched) or source.kind != mutation.fetched.kind or source.nn != mutation.fetched.nn:
        return None
    if tokens[a + 1][1] != "." or tokens[a + 2][0] != "ident":
        return None
    try:
        listed, j = r.field_pointer(tokens[a + 2][1], a + 3)
        value, k = r.expr(c)
    except GoError:
        return None
    if j != b or k != d or listed != pointer:
        return None
    if isinstance(value, Unresolved):
        # The shape is read; the value compared is not data.
        raise GoError(f"{tokens[rhs][1]} compares with {value.text}, computed at run time")
    if other is not None:
        if isinstance(value, FieldRef):
            value = FieldRef(value.fetched, f"{value.path}/{json_field_name(other)}", f"{value.text}.{other}")
        elif isinstance(value, dict) and other in value:
            value = value[other]
        else:
            return None
    value = kube_json(value, pointer)
    op = {"op": "keep" if keeps else "drop", "path": pointer, "where": {json_field_name(member): value}}
    return op, r.skip_parens(rhs + 1)


def mutation_assignment(tokens, i, env):
    """`mutate.Spec.X[0].Y = value` (or `= append(mutate.Spec.X, v...)`)
    at token i, `mutate` a Mutation: its JSON Patch operation recorded (or
    why it could not be), and the index after the statement; None when
    the tokens are not such an assignment."""
    mutation = env[tokens[i][1]]
    r = Reader(tokens, env)
    if tokens[i + 2][0] != "ident":
        return None
    try:
        pointer, j = r.field_pointer(tokens[i + 2][1], i + 3)
    except GoError as e:
        mutation.problem = mutation.problem or f"an assignment to {mutation.text}: {e}"
        return None
    if tokens[j][1] != "=":
        return None
    lhs = r.text(i, j)
    rhs = j + 1
    try:
        if tokens[rhs][1] == "append" and tokens[rhs + 1][1] == "(":
            args = call_args(tokens, rhs + 1)
            if not args or r.text(*args[0]) != lhs:
                raise GoError(f"append to another list than {lhs}")
            values = []
            for a, b in args[1:]:
                spread = tokens[b - 1][1] == "..."
                value, k = r.expr(a)
                if k != (b - 1 if spread else b):
                    raise GoError(f"{r.text(a, b)} is not a value the reader evaluates")
                values.extend(value if spread and isinstance(value, list) else [value])
            for value in values:
                mutation.ops.append({"op": "add", "path": pointer + "/-", "value": kube_json(value, pointer)})
            return r.skip_parens(rhs + 1)
        filtered = filter_call(tokens, rhs, env, mutation, pointer)
        if filtered:
            mutation.ops.append(filtered[0])
            return filtered[1]
        value, end = r.expr(rhs)
        if isinstance(value, KeepWhere) and value.mutation is mutation and value.pointer == pointer:
            mutation.ops.append({"op": "keep", "path": pointer, "where": value.where})
            return end
        last = pointer.rsplit("/", 1)[-1]
        op = "replace" if last.isdigit() else "add"
        mutation.ops.append({"op": op, "path": pointer, "value": kube_json(value, pointer)})
        return end
    except GoError as e:
        mutation.problem = mutation.problem or f"{lhs} is set to a value computed at run time ({e})"
        return r.skip_parens(rhs + 1) if tokens[rhs + 1][1] == "(" else rhs + 1

# The parameters of the helpers that judge expectations, as upstream
# `conformance/utils/{http,grpc,tcp,tls,udp}` declare them (not part of the
# vendored copy). `gwAddr` becomes the case's `gateway`; the parameters in
# HELPER_ARGUMENTS become its `arguments`: what the helper sends besides
# the literal (the TLS server name, whether TCP speaks TLS).
HELPER_PARAMS = {
    "http.MakeRequestAndExpectEventuallyConsistentResponse": ("t", "r", "timeoutConfig", "gwAddr", "expected"),
    "http.MakeRequestAndExpectFailure": ("t", "r", "timeoutConfig", "gwAddr", "expected"),
    "http.MakeRequest": ("t", "expected", "gwAddr", "protocol", "scheme"),
    "http.ExpectMirroredRequest": ("t", "client", "clientset", "mirrorPods", "path"),
    "grpc.MakeRequestAndExpectEventuallyConsistentResponse": ("t", "c", "timeoutConfig", "gwAddr", "expected"),
    "grpc.MakeRequestAndExpectEventuallyConsistentFailure": ("t", "c", "timeoutConfig", "gwAddr", "expected"),
    "tls.MakeTLSRequestAndExpectEventuallyConsistentResponse": (
        "t", "r", "timeoutConfig", "gwAddr", "serverCertificate", "clientCertificate",
        "clientCertificateKey", "serverName", "expected",
    ),
    "tls.MakeTLSRequestAndExpectEventuallyConsistentFailureResponse": (
        "t", "r", "timeoutConfig", "gwAddr", "serverCertificate", "clientCertificate",
        "clientCertificateKey", "serverName", "expected",
    ),
    "tcp.MakeTCPRequestAndExpectEventuallyValidResponse": (
        "t", "timeoutConfig", "gwAddr", "serverCertificate", "serverName", "useTLS", "expected",
    ),
    "udp.ExpectEchoResponseFromBackend": ("t", "timeoutConfig", "gwAddr", "expected"),
}
HELPER_ARGUMENTS = ("serverName", "useTLS")
# Certificates the TLS helpers are given (PEM read from a Secret with
# `kubernetes.GetTLSSecret`): the server certificate the client trusts as
# its root, and the client certificate and key it presents. `nil` is none.
# Read for the `tls` helpers; the `tcp` helper's server certificate (a CA
# the test builds from a ConfigMap) is not ported, its passthrough client
# accepting any certificate.
CERTIFICATE_ARGUMENTS = ("serverCertificate", "clientCertificate", "clientCertificateKey")
# Helpers whose case is nothing without the Gateway address.
L4_PACKAGES = ("tcp", "udp")

# `kubernetes` functions that return a Gateway's address (and, for TLS
# routes, the routes' hostnames second). For GatewayAndRoutesMustBeAccepted
# the `usePort` argument's position.
ADDRESS_FUNCTIONS = {
    "GatewayAndRoutesMustBeAccepted": 6,
    "GatewayAndHTTPRoutesMustBeAccepted": None,
    "GatewayAndTCPRoutesMustBeAccepted": None,
    "GatewayAndUDPRoutesMustBeAccepted": None,
    "GatewayAndTLSRoutesMustBeAccepted": None,
    "WaitForGatewayAddress": None,
}


def call_args(tokens, paren):
    """The token ranges of a call's top-level arguments; `paren` is its `(`."""
    args, depth, start, k = [], 0, paren + 1, paren + 1
    while k < len(tokens):
        t = tokens[k][1]
        if t in ("(", "{", "["):
            depth += 1
        elif t in (")", "}", "]"):
            if depth == 0:
                if k > start:
                    args.append((start, k))
                return args
            depth -= 1
        elif t == "," and depth == 0:
            args.append((start, k))
            start = k + 1
        k += 1
    return args


def address_call(tokens, i, env):
    """At `kubernetes.F(` (token i is `kubernetes`) for an ADDRESS_FUNCTIONS
    F: (GatewayAddress, RouteHostnames or None), or None."""
    if not (tokens[i][1] == "kubernetes" and tokens[i + 1][1] == "." and tokens[i + 3][1] == "("):
        return None
    func = tokens[i + 2][1]
    if func not in ADDRESS_FUNCTIONS:
        return None
    r = Reader(tokens, env)
    args = call_args(tokens, i + 3)
    ref = None
    for n, (a, b) in enumerate(args):
        if tokens[a][1] == "kubernetes" and tokens[a + 2][1] == "NewGatewayRef":
            ref = n
            ref_args = call_args(tokens, a + 3)
            break
    if ref is None or not ref_args:
        return None
    try:
        gateway, _ = r.expr(ref_args[0][0])
        listener = ""
        if len(ref_args) > 1:
            listener, _ = r.expr(ref_args[1][0])
    except GoError:
        return None
    if not isinstance(gateway, dict) or unresolved_in(gateway) or not isinstance(listener, str):
        return None
    use_port = True
    position = ADDRESS_FUNCTIONS[func]
    if position is not None:
        if position >= len(args):
            return None
        try:
            use_port, _ = r.expr(args[position][0])
        except GoError:
            return None
        if not isinstance(use_port, bool):
            return None
    address = GatewayAddress({"Name": gateway.get("Name"), "Namespace": gateway.get("Namespace")}, listener, use_port)
    hostnames = None
    if func == "GatewayAndTLSRoutesMustBeAccepted":
        routes = []
        for a, b in args[ref + 1:]:
            try:
                value, _ = r.expr(a)
            except GoError:
                routes = None
                break
            items = value if isinstance(value, list) else [value]
            if any(not isinstance(v, dict) or unresolved_in(v) for v in items):
                routes = None
                break
            routes.extend({"Name": v.get("Name"), "Namespace": v.get("Namespace")} for v in items)
        if routes is not None:
            hostnames = RouteHostnames(routes)
    return address, hostnames


def host_port_call(tokens, i, env, names):
    """At `net.JoinHostPort(gw, "443")` or `net.SplitHostPort(gw)` (token i
    is `net`) over a Gateway address: that address with the port given, or
    without its port; None otherwise. `names` are the assigned names."""
    if not (tokens[i][1] == "net" and tokens[i + 1][1] == "." and tokens[i + 3][1] == "("):
        return None
    func = tokens[i + 2][1]
    args = call_args(tokens, i + 3)
    if not args or args[0][1] != args[0][0] + 1:
        return None
    address = env.get(tokens[args[0][0]][1])
    if not isinstance(address, GatewayAddress):
        return None
    if func == "SplitHostPort" and len(args) == 1 and len(names) == 3:
        return GatewayAddress(address.gateway, address.listener, False)
    if func == "JoinHostPort" and len(args) == 2 and len(names) == 1:
        try:
            port, end = Reader(tokens, env).expr(args[1][0])
        except GoError:
            return None
        if end == args[1][1] and isinstance(port, str) and port.isdigit():
            return GatewayAddress(address.gateway, address.listener, True, int(port))
    return None


def tls_secret_call(tokens, i, env):
    """At `kubernetes.GetTLSSecret(client, nn)` (token i is `kubernetes`)
    with `nn` known here: the Secret's reference, else None."""
    if not (
        tokens[i][1] == "kubernetes"
        and tokens[i + 1][1] == "."
        and tokens[i + 2][1] == "GetTLSSecret"
        and tokens[i + 3][1] == "("
    ):
        return None
    args = call_args(tokens, i + 3)
    if len(args) != 2:
        return None
    try:
        value, end = Reader(tokens, env).expr(args[1][0])
    except GoError:
        return None
    if end != args[1][1] or not isinstance(value, dict) or unresolved_in(value):
        return None
    if not isinstance(value.get("Name"), str) or not isinstance(value.get("Namespace"), str):
        return None
    return {"Name": value["Name"], "Namespace": value["Namespace"]}


# Helpers called with plain arguments and no expectation literal: each call
# is a case of its own, with the parameters upstream declares
# (`conformance/utils/{tls,tcp,udp,weight}`, not part of the vendored
# copy) and the protocol of the case: a TLS dial is a TCP case (it goes to
# a Gateway's own address like one).
PLAIN_HELPERS = {
    "tls.MakeTLSConnectionAndExpectEventuallyConnectionRejection": ("tcp", ("t", "timeoutConfig", "gwAddr", "serverName")),
    "tcp.ExpectEchoResponse": ("tcp", ("t", "timeoutConfig", "gwAddr")),
    "tcp.ExpectAddressBeAvailable": ("tcp", ("t", "timeoutConfig", "gwAddr")),
    "udp.ExpectEchoResponse": ("udp", ("t", "timeoutConfig", "gwAddr")),
    "weight.TestWeightedDistribution": (None, ("sender", "expectedWeights")),
}
PLAIN_PACKAGES = ("tls", "tcp", "udp", "weight")


class WeightSender:
    """A `weight.NewFunctionBasedSender(func() (string, error) {...})`:
    what one sample sends, read from the call it makes (`sender`: the
    upstream function, `protocol`), the Gateway address it goes to, and
    the expectation it sends and checks (HTTP and gRPC)."""

    def __init__(self, sender, protocol, gateway, expectation):
        self.sender = sender
        self.protocol = protocol
        self.gateway = gateway
        self.expectation = expectation


def weight_sender(tokens, paren, env):
    """At `weight.NewFunctionBasedSender(` (`paren` is its `(`): the
    WeightSender its function literal makes, or a reason it is not read.
    A sample is one of `tcp.EchoSendOnce(ctx, gwAddr, ...)`, a package
    function that dials `"udp"` with `(ctx, gwAddr, ...)`,
    `http.MakeRequest(t, &expected, gwAddr, ...)`, or a gRPC client's
    `client.SendRPC(t, gwAddr, expected, timeout)` (whichever client: the
    suite's or a `grpc.DefaultClient`); `x := y` inside names y."""
    r = Reader(tokens, env)
    end = r.skip_parens(paren)
    aliases = {}
    funcs = env.get(PACKAGE, {}).get("funcs", {})

    def value_of(a, b):
        if tokens[a][1] == "&":
            a += 1
        if b != a + 1 or tokens[a][0] != "ident":
            return Unresolved(r.text(a, b))
        name = aliases.get(tokens[a][1], tokens[a][1])
        return env.get(name, Unresolved(name))

    for k in range(paren + 1, end):
        tok = tokens[k][1]
        if tokens[k][0] == "ident" and tokens[k + 1][1] == ":=" and tokens[k + 2][0] == "ident" and tokens[k + 3][1] not in (".", "(", "{", "[", ","):
            aliases[tok] = tokens[k + 2][1]
        call = None
        if tok == "tcp" and tokens[k + 1][1] == "." and tokens[k + 2][1] == "EchoSendOnce" and tokens[k + 3][1] == "(":
            call = ("tcp.EchoSendOnce", "tcp", k + 3, 1, None)
        elif tok == "http" and tokens[k + 1][1] == "." and tokens[k + 2][1] == "MakeRequest" and tokens[k + 3][1] == "(":
            call = ("http.MakeRequest", "http", k + 3, 2, 1)
        elif tokens[k][0] == "ident" and tokens[k + 1][1] == "." and tokens[k + 2][1] == "SendRPC" and tokens[k + 3][1] == "(":
            call = ("grpc.SendRPC", "grpc", k + 3, 1, 2)
        elif tokens[k][0] == "ident" and tokens[k - 1][1] != "." and tokens[k + 1][1] == "(" and tok in funcs and tok not in env:
            f_tokens, _, body, body_end, _ = funcs[tok]
            networks = {
                f_tokens[m + 4][1]
                for m in range(body, body_end - 4)
                if f_tokens[m][1] == "DialContext" and f_tokens[m + 1][1] == "(" and f_tokens[m + 3][1] == "," and f_tokens[m + 4][0] == "str"
            }
            if networks == {'"udp"'}:
                call = (tok, "udp", k + 1, 1, None)
        if not call:
            continue
        sender, protocol, call_paren, gw_index, expected_index = call
        args = call_args(tokens, call_paren)
        if len(args) <= max(gw_index, expected_index or 0):
            return None, f"{sender}: too few arguments"
        gateway = value_of(*args[gw_index])
        if not isinstance(gateway, GatewayAddress):
            return None, f"{sender} argument gwAddr: {r.text(*args[gw_index])} is computed at run time"
        expectation = {}
        if expected_index is not None:
            expectation = value_of(*args[expected_index])
            if not isinstance(expectation, dict) or unresolved_in(expectation) or not json_value(expectation):
                return None, f"{sender} argument expected: {r.text(*args[expected_index])} is not an expectation read here"
        return WeightSender(sender, protocol, gateway, expectation), None
    return None, "the sender's function makes no request this reader knows (tcp.EchoSendOnce, a UDP dial, http.MakeRequest, a gRPC client's SendRPC)"


def plain_helper_case(tokens, paren, helper, env, subtest):
    """A case of a PLAIN_HELPERS call (`paren` is its `(`): (protocol,
    case, None) or (protocol, None, reason)."""
    protocol, params = PLAIN_HELPERS[helper]
    args = call_args(tokens, paren)
    r = Reader(tokens, env)
    out = {"helper": helper, "subtest": subtest}
    if len(args) != len(params):
        return protocol or "tcp", None, f"{helper}: {len(args)} arguments, upstream declares {len(params)}"
    for name, (a, b) in zip(params, args):
        if name in ("t", "timeoutConfig"):
            continue
        value = env.get(tokens[a][1]) if b == a + 1 else None
        if name == "gwAddr":
            if not isinstance(value, GatewayAddress):
                return protocol or "tcp", None, f"{helper} argument gwAddr: {r.text(a, b)} is computed at run time"
            out["gateway"] = value.json()
        elif name == "sender":
            if isinstance(value, tuple):
                return "tcp", None, f"{helper} argument sender: {value[1]}"
            if not isinstance(value, WeightSender):
                return "tcp", None, f"{helper} argument sender: {r.text(a, b)} is not a sender read here"
            protocol = value.protocol
            out = {**value.expectation, **out, "gateway": value.gateway.json()}
            out.setdefault("arguments", {})["sender"] = value.sender
        else:
            try:
                value, end = r.expr(a)
            except GoError as e:
                return protocol or "tcp", None, f"{helper} argument {name}: {e}"
            if end != b or unresolved_in(value) or not json_value(value):
                return protocol or "tcp", None, f"{helper} argument {name}: {r.text(a, b)} is computed at run time"
            out.setdefault("arguments", {})[name] = value
    return protocol, out, None


def helper_call(tokens, paren, helper, env):
    """The case fields a helper call's plain arguments give: `gateway` (the
    Gateway whose address `gwAddr` is) and `arguments`; or a reason the case
    cannot be ported."""
    params = HELPER_PARAMS.get(helper)
    if not params:
        return {}, None
    args = call_args(tokens, paren)
    r = Reader(tokens, env)
    out = {}
    for name, (a, b) in zip(params, args):
        if name == "gwAddr":
            if b == a + 1 and isinstance(env.get(tokens[a][1]), GatewayAddress):
                out["gateway"] = env[tokens[a][1]].json()
            elif helper.split(".")[0] in L4_PACKAGES:
                # An HTTP case still says where it goes (its Host); an L4
                # case says nothing but the address.
                return {}, f"{helper} argument gwAddr: {r.text(a, b)} is computed at run time"
        elif name in CERTIFICATE_ARGUMENTS and helper.startswith("tls."):
            value = env.get(tokens[a][1]) if b == a + 1 else None
            if b == a + 1 and tokens[a][1] == "nil":
                continue
            if not isinstance(value, TLSSecretPart):
                return {}, f"{helper} argument {name}: {r.text(a, b)} is not a Secret's certificate or key read here"
            out.setdefault("arguments", {})[name] = value.json()
        elif name in HELPER_ARGUMENTS:
            try:
                value, end = r.expr(a)
            except GoError as e:
                return {}, f"{helper} argument {name}: {e}"
            if end != b or unresolved_in(value):
                return {}, f"{helper} argument {name}: {r.text(a, b)} is computed at run time"
            out.setdefault("arguments", {})[name] = value
    return out, None


def range_loop(tokens, i, env):
    """At `for _, v := range X {` whose X evaluates to a list: (v, the
    values, the body's `{` index, the index after its `}`), else None."""
    if not (
        tokens[i][1] == "for"
        and tokens[i + 1][0] == "ident"
        and tokens[i + 2][1] == ","
        and tokens[i + 3][0] == "ident"
        and tokens[i + 4][1] == ":="
        and tokens[i + 5][1] == "range"
    ):
        return None
    r = Reader(tokens, env)
    try:
        values, j = r.expr(i + 6)
    except GoError:
        return None
    if not isinstance(values, list) or tokens[j][1] != "{" or unresolved_in(values):
        return None
    return tokens[i + 3][1], values, j, r.skip_braces(j), tokens[i + 1][1]


def scan_body(tokens, start, end, env=None, subtests=(), state=None):
    """Expectation literals in a Test body, in source order, with the local
    values known at each point, the Gateways the test names, and its status
    checks (`kubernetes.*` calls, see status_check). A `range` loop over
    values known here is read once per value (as the loop runs).
    `subtests` are the enclosing `t.Run`s: (index of the call's `)`, name);
    `state` is shared with the loop bodies and local functions read inside
    (a change of objects there holds after them too)."""
    env = {} if env is None else env
    cases = []
    gateways = []
    checks = []
    subtests = list(subtests)
    r = Reader(tokens, env)
    # A test that deletes, updates or creates objects between its cases
    # (`suite.Client.Delete(...)`) expects the later cases of a state the
    # data does not carry: those cases are not ported.
    state = {"changed": None, "steps": []} if state is None else state

    def add_case(entry):
        if env.get(GUARD) and entry[1] is not None:
            # After `if len(obj.F) == 0 { continue }`: run or not by a
            # condition only the steps' patch carries.
            entry = (entry[0], None, f"run only when {env[GUARD][2]}, a condition known at run time")
        cases.append(entry)
        state["steps"].append(("case", entry))

    i = start
    while i < end:
        kind, tok = tokens[i]
        while subtests and subtests[-1][0] <= i:
            subtests.pop()
        after_each = each_loop(tokens, i, env)
        if after_each:
            i = after_each
            continue
        after_guard = guard_statement(tokens, i, env)
        if after_guard:
            i = after_guard
            continue
        after_base = merge_base(tokens, i, env) if tokens[i - 1][1] != "." else None
        if after_base:
            i = after_base
            continue
        loop = range_loop(tokens, i, env) or index_loop(tokens, i, env)
        kept = keep_loop(tokens, i, env)
        if kept:
            env[kept[0]] = kept[1]
            i = kept[2]
            continue
        if loop:
            var, values, body_start, body_end, index_var = loop
            for n, value in enumerate(values):
                found, found_gateways, found_checks = scan_body(
                    tokens, body_start + 1, body_end - 1, {**env, index_var: n, var: value}, subtests, state
                )
                cases.extend(found)
                gateways.extend(g for g in found_gateways if g not in gateways)
                checks.extend(found_checks)
            i = body_end
            continue
        # t.Run("name", func(t *testing.T) {...}): the checks inside are
        # that sub-test's, and the names it declares its own (Go's scope:
        # a `gwNN :=` inside does not change the test's `gwNN`).
        if tok == "Run" and tokens[i - 1][1] == "." and tokens[i - 2][0] == "ident" and tokens[i + 1][1] == "(":
            args = call_args(tokens, i + 1)
            if len(args) == 2:
                try:
                    name, j = r.expr(args[0][0])
                    if j != args[0][1] or not isinstance(name, str):
                        name = r.text(*args[0])
                except GoError:
                    name = r.text(*args[0])
                call_end = args[-1][1]
                if tokens[args[1][0]][1] == "func" and tokens[args[1][0] + 1][1] == "(":
                    k = r.skip_parens(args[1][0] + 1)
                    while tokens[k][1] != "{":
                        k += 1
                    body_end = r.skip_braces(k)
                    inner = dict(env)
                    found, found_gateways, found_checks = scan_body(
                        tokens, k + 1, body_end - 1, inner, subtests + [(call_end, name)], state
                    )
                    cases.extend(found)
                    gateways.extend(g for g in found_gateways if g not in gateways)
                    checks.extend(found_checks)
                    # `x = ...` inside assigns the test's `x`.
                    declared = declared_names(tokens, k + 1, body_end - 1)
                    for key, value in inner.items():
                        if key not in declared and (key not in env or env[key] is not value):
                            env[key] = value
                    i = call_end + 1
                    continue
                subtests.append((call_end, name))
        if (
            kind == "ident"
            and tokens[i - 1][1] != "."
            and tokens[i + 1][1] == "."
            and tokens[i + 2][0] == "ident"
            and tokens[i + 3][1] == "("
            and tok not in env
            and import_path(env, tok) == KUBERNETES_PACKAGE
            and is_status_check(tokens, i)
        ):
            subtest = "/".join(name for _, name in subtests)
            guarded = env.get(GUARD) and f"the condition {env[GUARD][2]} (known at run time)"
            check = status_check(tokens, i, env, subtest, state["changed"] or guarded)
            checks.append(check)
            state["steps"].append(("check", check))
        # `suite.Client.Patch/Delete/Update/Create(...)` (or a client
        # parameter's): a step changing one object, when read (see
        # client_change); else the later cases and checks are not ported.
        if is_client(tokens, i) and tokens[i + 2][1] in STATE_CHANGES and tokens[i + 3][1] == "(":
            step, problem = client_change(tokens, i, env)
            if step:
                state["steps"].append(("change", step))
            else:
                state["changed"] = state["changed"] or f"{tok}.{tokens[i + 2][1]} ({problem})"
            i = r.skip_parens(i + 3)
            continue
        # `suite.Applier.MustApplyObjectsWithCleanup(t, c, timeouts,
        # []client.Object{obj}, cleanup)` writes objects the test builds
        # (a newer route, a ConfigMap); `MustApplyWithCleanup(..., "file",
        # ...)` a manifest file.
        if tok == "Applier" and tokens[i + 1][1] == "." and tokens[i + 2][1].startswith("MustApply") and tokens[i + 3][1] == "(":
            steps, problem = applier_change(tokens, i, env)
            if steps:
                state["steps"].extend(("change", step) for step in steps)
            else:
                state["changed"] = state["changed"] or f"Applier.{tokens[i + 2][1]} ({problem})"
            i = r.skip_parens(i + 3)
            continue
        # `suite.Client.Get(ctx, nn, obj)` (and `List`) fills `obj` with
        # the object as the cluster has it: from here on a run-time value,
        # whose fields a step may name (Fetched).
        if is_client(tokens, i) and tokens[i + 2][1] in ("Get", "List") and tokens[i + 3][1] == "(":
            args = call_args(tokens, i + 3)
            target = [a for a in args if tokens[a[0]][0] == "ident" and a[1] == a[0] + 1]
            if len(args) >= 2 and target and target[-1] == args[-1 if tokens[i + 2][1] == "Get" else 1]:
                name = tokens[target[-1][0]][1]
                text = f"{name} (read with Client.{tokens[i + 2][1]})"
                env[name] = fetched(env.get(name), tokens, args, env, text) if tokens[i + 2][1] == "Get" else listed(env.get(name), tokens, args, env, text)
                if isinstance(env[name], Fetched):
                    env[name].after_change = changed_before(env[name], state)
        # `mutate.Spec.X = value` on a DeepCopy of a fetched object: an
        # operation of the patch it becomes.
        if kind == "ident" and tokens[i - 1][1] != "." and tokens[i + 1][1] == "." and isinstance(env.get(tok), Mutation):
            end_of = mutation_assignment(tokens, i, env)
            if end_of:
                i = end_of
                continue
        # `cert, key, err := kubernetes.GetTLSSecret(client, nn)` and
        # `host, _, err = net.SplitHostPort(gwAddr)`: three names assigned.
        if kind == "ident" and tokens[i - 1][1] not in (",", ".") and [t[1] for t in tokens[i + 1:i + 6:2]] == [",", ",", tokens[i + 5][1]] and tokens[i + 5][1] in (":=", "=") and tokens[i + 2][0] == "ident" and tokens[i + 4][0] == "ident":
            names = [tokens[i][1], tokens[i + 2][1]]
            secret = tls_secret_call(tokens, i + 6, env)
            if secret:
                for var, key in zip(names, ("tls.crt", "tls.key")):
                    if var != "_":
                        env[var] = TLSSecretPart(secret, key)
                i += 6
                continue
            address = host_port_call(tokens, i + 6, env, names + [tokens[i + 4][1]])
            if address and tok != "_":
                env[tok] = address
                i += 6
                continue
        # `addr := net.JoinHostPort(gwAddr, "443")`: the address at a port.
        if kind == "ident" and tokens[i + 1][1] in (":=", "=") and tokens[i - 1][1] not in (",", "."):
            address = host_port_call(tokens, i + 2, env, [tok])
            if address:
                env[tok] = address
                i += 2
                continue
        # `a := kubernetes.GatewayAnd...MustBeAccepted(...)` and
        # `a, b := ...`: the Gateway's address (and the routes' hostnames).
        if kind == "ident" and (
            tokens[i + 1][1] in (":=", "=")
            or (tokens[i + 1][1] == "," and tokens[i + 2][0] == "ident" and tokens[i + 3][1] in (":=", "="))
        ) and tokens[i - 1][1] not in (",", "."):
            rhs = i + 2 if tokens[i + 1][1] in (":=", "=") else i + 4
            found_address = address_call(tokens, rhs, env)
            if found_address:
                address, hostnames = found_address
                if tok != "_":
                    env[tok] = address
                if rhs == i + 4 and hostnames and tokens[i + 2][1] != "_":
                    env[tokens[i + 2][1]] = hostnames
                i = rhs
                continue
        # `selector, err := metav1.LabelSelectorAsSelector(x)` and the other
        # IDENTITY_CALLS with an error result: the first name is the value.
        if (
            kind == "ident"
            and tokens[i + 1][1] == ","
            and tokens[i + 2][0] == "ident"
            and tokens[i + 3][1] in (":=", "=")
            and tokens[i - 1][1] not in (",", ".")
            and tokens[i + 4][0] == "ident"
            and tokens[i + 5][1] == "."
            and (import_path(env, tokens[i + 4][1]), tokens[i + 6][1]) in IDENTITY_CALLS
            and tokens[i + 4][1] not in env
        ):
            try:
                value, j = r.expr(i + 4)
            except GoError:
                value, j = Unresolved(tok), i + 4
            env[tok] = value
            i = j
            continue
        # `name := func(params) results { body }`: a local function, read
        # where it is called (with its arguments), not where it is written.
        if kind == "ident" and tokens[i + 1][1] == ":=" and tokens[i + 2][1] == "func" and tokens[i + 3][1] == "(":
            params = [tokens[a][1] for a, b in call_args(tokens, i + 3)]
            k = r.skip_parens(i + 3)
            while tokens[k][1] != "{":
                k += 1
            body_end = r.skip_braces(k)
            env[tok] = LocalFunction(tokens, params, k, body_end)
            i = body_end
            continue
        # A call of a local function that does more than return a value,
        # as a statement: its body read here, its parameters bound.
        if (
            kind == "ident"
            and tokens[i + 1][1] == "("
            and tokens[i - 1][1] != "."
            and isinstance(env.get(tok), LocalFunction)
            and tokens[env[tok].body + 1][1] != "return"
        ):
            func = env[tok]
            paren_end = r.skip_parens(i + 1)
            bound = {}
            for name, (a, b) in zip(func.params, call_args(tokens, i + 1)):
                try:
                    value, j = r.expr(a)
                    bound[name] = value if j == b else Unresolved(r.text(a, b))
                except GoError:
                    bound[name] = Unresolved(r.text(a, b))
            found, found_gateways, found_checks = scan_body(
                func.tokens, func.body + 1, func.body_end - 1, {**env, **bound}, subtests, state
            )
            cases.extend(found)
            gateways.extend(g for g in found_gateways if g not in gateways)
            checks.extend(found_checks)
            i = paren_end
            continue
        # A function of the test package that changes objects through the
        # client it is given (`patchConfigMapCACert(ctx, t, suite.Client,
        # nn, data)`, `setupEndpointSlices(...)`): its body read here with
        # its parameters bound, its changes the test's steps.
        if (
            kind == "ident"
            and tokens[i + 1][1] == "("
            and tokens[i - 1][1] != "."
            and tok not in env
            and package_changes(env, tok)
        ):
            ftokens, params, fbody, fbody_end, fimports = env[PACKAGE]["funcs"][tok]
            paren_end = r.skip_parens(i + 1)
            bound = {}
            for name, (a, b) in zip(params, call_args(tokens, i + 1)):
                try:
                    value, j = r.expr(a)
                    bound[name] = value if j == b else Unresolved(r.text(a, b))
                except GoError:
                    bound[name] = Unresolved(r.text(a, b))
            inner = {IMPORTS: fimports, PACKAGE: env[PACKAGE], SUITE_PARAM: env.get(SUITE_PARAM), **bound}
            found, found_gateways, found_checks = scan_body(ftokens, fbody + 1, fbody_end - 1, inner, subtests, state)
            cases.extend(found)
            gateways.extend(g for g in found_gateways if g not in gateways)
            checks.extend(found_checks)
            i = paren_end
            continue
        # The statements of checks written as code (`code_statement`), a
        # test body's own struct types, and a function of the test package
        # called as a statement (`package_statement`).
        if tok == "type" and tokens[i + 1][0] == "ident" and tokens[i + 2][1] == "struct":
            env[LOCAL_TYPES] = {*env.get(LOCAL_TYPES, ()), tokens[i + 1][1]}
        after = code_statement(tokens, i, env, subtests, state, cases)
        if after is not None:
            i = after
            continue
        called = package_statement(tokens, i, env, subtests, state)
        if called is not None:
            i, (found, found_gateways, found_checks) = called
            cases.extend(found)
            gateways.extend(g for g in found_gateways if g not in gateways)
            checks.extend(found_checks)
            continue
        # Local `x := expr` (and `x = expr`, and the first name of a
        # `var (...)` block): remember what evaluates.
        if kind == "ident" and (
            tokens[i + 1][1] == ":="
            or (tokens[i + 1][1] == "=" and tokens[i - 1][1] in (";", "{", "}", ")", "]") or tokens[i + 1][1] == "=" and tokens[i - 1][0] != "op")
            or (tokens[i + 1][1] == "=" and tokens[i - 1][1] == "(" and tokens[i - 2][1] == "var")
        ) and tokens[i - 1][1] not in (".", ","):
            try:
                value, _ = r.expr(i + 2)
            except GoError:
                value = Unresolved(tok)
            if isinstance(value, Unresolved) and tokens[i + 1][1] == ":=":
                # A new name whose value is known only at run time hides any
                # outer one of the same name.
                env[tok] = Unresolved(tok)
            if not isinstance(value, Unresolved):
                env[tok] = value
                if (
                    isinstance(value, dict)
                    and set(value) >= {"Name", "Namespace"}
                    # A Gateway has a namespace (`gwcNN`, a GatewayClass's
                    # name, has none).
                    and value["Namespace"]
                    and "gw" in tok.lower()
                    # `routeInGWNS`, `badGWRouteNN`: a route's name.
                    and "route" not in tok.lower()
                    and value not in gateways
                    and not unresolved_in(value)
                ):
                    gateways.append(value)
        # `sender := weight.NewFunctionBasedSender(func() ... {...})`: what
        # a weighted distribution's samples send, read from the function.
        if (
            kind == "ident"
            and tokens[i + 1][1] == ":="
            and tokens[i + 2][1] == "weight"
            and tokens[i + 3][1] == "."
            and tokens[i + 4][1] == "NewFunctionBasedSender"
            and tokens[i + 5][1] == "("
        ):
            sender, problem = weight_sender(tokens, i + 5, env)
            env[tok] = sender if sender else ("sender", problem)
            i = r.skip_parens(i + 5)
            continue
        # `tls.MakeTLSConnectionAndExpectEventuallyConnectionRejection(t,
        # timeouts, gwAddr, serverName)` and the other PLAIN_HELPERS: a case
        # of plain arguments.
        if (
            tok in PLAIN_PACKAGES
            and tokens[i - 1][1] != "."
            and tokens[i + 1][1] == "."
            and f"{tok}.{tokens[i + 2][1]}" in PLAIN_HELPERS
            and tokens[i + 3][1] == "("
            and tok not in env
        ):
            helper = f"{tok}.{tokens[i + 2][1]}"
            subtest = "/".join(name for _, name in subtests)
            if state["changed"]:
                add_case((PLAIN_HELPERS[helper][0] or "tcp", None, f"after {state['changed']}: the test changes its objects between cases in a way the steps do not carry"))
            else:
                add_case(plain_helper_case(tokens, i + 3, helper, env, subtest))
            i = r.skip_parens(i + 3)
            continue
        # pkg.ExpectedResponse{...} and []pkg.ExpectedResponse{{...}, ...}
        if (
            tok in EXPECTATION_PACKAGES
            and tokens[i + 1][1] == "."
            and tokens[i + 2][1] == "ExpectedResponse"
            and tokens[i + 3][1] == "{"
        ):
            slice_of = tokens[i - 1][1] == "]" and tokens[i - 2][1] == "["
            literal_start = i + 3
            if state["changed"]:
                add_case((tok, None, f"after {state['changed']}: the test changes its objects between cases in a way the steps do not carry"))
                i = r.skip_braces(literal_start)
                continue
            try:
                value, j = r.composite(literal_start, True)
                items = value if slice_of else [value]
                calls = consuming_calls(tokens, i - 2 if slice_of else i, j, end) or [(None, None)]
                # A TLS helper's expectation is sent once per call (with
                # another client certificate each); other helpers' literals
                # are judged by the first call (later ones pick branches,
                # weights or mirrors the data does not carry).
                calls = [c for c in calls if c[0] and c[0].startswith("tls.")] if calls[0][0] and calls[0][0].startswith("tls.") else calls[:1]
                for helper, paren in calls:
                    extra, problem = helper_call(tokens, paren, helper, env) if helper else ({}, None)
                    for item in items:
                        if helper:
                            item = {**item, "helper": helper, **extra}
                        add_case((tok, None if problem else item, problem))
                i = j
                continue
            except GoError as e:
                add_case((tok, None, f"{e} in {r.text(i, min(i + 12, end))} ..."))
                i = r.skip_braces(literal_start)
                continue
        i += 1
    return cases, gateways, checks


# `kubernetes` functions that check nothing: they build references, read
# objects, or wait for namespaces (the runner's setup does).
NOT_CHECKS = (
    "NewGatewayRef", "NewResourceRef", "NamespacesMustBeReady", "MeshNamespacesMustBeReady", "GetTLSSecret",
    "GetConfigMapData", "DumpEchoLogs",
)
# Leading arguments of the status helpers that are the test's machinery,
# not the expectation: `t`, the client, the timeouts.
MACHINERY_ARGUMENTS = (re.compile(r"t"), re.compile(r".*[Cc]lient|c|cl|cli"), re.compile(r".*[Tt]imeoutConfig"))


def declared_names(tokens, start, end):
    """The names declared between start and end (`a, b :=`, `var a`,
    `var (a = ...)`, and a function literal's parameters)."""
    names = set()
    for k in range(start, end):
        if tokens[k][1] == ":=":
            m = k - 1
            while tokens[m][0] == "ident":
                names.add(tokens[m][1])
                if tokens[m - 1][1] != ",":
                    break
                m -= 2
        elif tokens[k][1] == "var" and tokens[k + 1][0] == "ident":
            names.add(tokens[k + 1][1])
        elif tokens[k][1] == "var" and tokens[k + 1][1] == "(":
            m = k + 2
            depth = 0
            while m < end and not (depth == 0 and tokens[m][1] == ")"):
                if depth == 0 and tokens[m][0] == "ident" and tokens[m + 1][1] == "=" and tokens[m - 1][1] not in (".",):
                    names.add(tokens[m][1])
                depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(tokens[m][1], 0)
                m += 1
        elif tokens[k][1] == "func" and tokens[k + 1][1] == "(":
            names.update(tokens[a][1] for a, b in call_args(tokens, k + 1))
    return names


def assigned_names(tokens, i):
    """The names a statement `a, b := <call at i>` assigns, or []."""
    if tokens[i - 1][1] not in (":=", "="):
        return []
    names = []
    k = i - 2
    while tokens[k][0] == "ident":
        names.insert(0, tokens[k][1])
        if tokens[k - 1][1] != ",":
            break
        k -= 2
    return names


def is_status_check(tokens, i):
    """Whether `kubernetes.F(` at token i checks status: every function
    but NOT_CHECKS, and `WaitForGatewayAddress` only when its address is
    not kept (kept, it is a case's `gateway`)."""
    func = tokens[i + 2][1]
    if func in NOT_CHECKS:
        return False
    if func == "WaitForGatewayAddress":
        names = assigned_names(tokens, i)
        return not names or names[0] == "_"
    return True


def with_secrets(value):
    """A case's value with the Secret parts it names (`ClientCert:
    string(cert)` of a `GetTLSSecret`) written as arguments are:
    `{"Secret": {Name, Namespace}, "Key": "tls.crt"}`."""
    if isinstance(value, TLSSecretPart):
        return value.json()
    if isinstance(value, dict):
        return {k: with_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_secrets(v) for v in value]
    return value


def json_value(value):
    """Whether a value read is plain data (not a Gateway address, a
    Secret's part or routes' hostnames, which are run-time values)."""
    if isinstance(value, dict):
        return all(json_value(v) for v in value.values())
    if isinstance(value, list):
        return all(json_value(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def status_check(tokens, i, env, subtest, changed):
    """A status check, `kubernetes.F(t, client, timeouts, args...)` at
    token i: its helper, sub-test and evaluated arguments (after the
    machinery), or the reason it is not ported."""
    helper = f"kubernetes.{tokens[i + 2][1]}"
    if changed:
        return {
            "helper": helper,
            "subtest": subtest,
            "reason": f"after {changed}: the test changes its objects before this check in a way the steps do not carry",
        }
    r = Reader(tokens, env)
    args = call_args(tokens, i + 3)
    for pattern in MACHINERY_ARGUMENTS:
        if args and pattern.fullmatch(r.text(*args[0])):
            args = args[1:]
    arguments = []
    for n, (a, b) in enumerate(args):
        spread = tokens[b - 1][1] == "..."
        text = r.text(a, b)
        try:
            value, j = r.expr(a)
        except GoError as e:
            return {"helper": helper, "subtest": subtest, "reason": f"argument {n}: {e} in {text}"}
        if isinstance(value, Fetched):
            # `BackendTLSPolicyMustHaveLatestConditions(t, original)`: the
            # object read with Client.Get, named as it was read.
            value = dict(value.nn)
        problem = None
        if j != (b - 1 if spread else b):
            problem = f"argument {n}: {text} is not a value the reader evaluates"
        elif unresolved_in(value):
            path, what = unresolved_in(value)
            problem = f"argument {n}: {what} is computed at run time" if path == "." else f"argument {n}: {path}: {what} is computed at run time"
        elif not json_value(value):
            problem = f"argument {n}: {text} is a value known only at run time"
        elif spread and not isinstance(value, list):
            problem = f"argument {n}: {text} is not a list"
        if problem:
            return {"helper": helper, "subtest": subtest, "reason": problem}
        if spread:
            arguments.extend(value)
        else:
            arguments.append(value)
    return {"helper": helper, "subtest": subtest, "arguments": arguments}


def call_name(tokens, paren):
    """`pkg.Func` for the `(` at `paren`, or None."""
    if (
        tokens[paren - 1][0] == "ident"
        and tokens[paren - 2][1] == "."
        and tokens[paren - 3][1] in HELPER_PACKAGES
    ):
        return f"{tokens[paren - 3][1]}.{tokens[paren - 1][1]}"
    return None


def consuming_calls(tokens, start, end_literal, end_body):
    """The helper calls that take an expectation literal (their semantics: a
    consistent response, a failure, a mirrored request), as (name, `(`
    index): the call it is an argument of, or, for a literal assigned to a
    variable, every later call whose arguments name that variable or a
    `range` variable over it (one case each: the same expectation sent with
    other arguments, such as another client certificate)."""
    depth = 0
    names = set()
    for k in range(start - 1, 0, -1):
        t = tokens[k][1]
        if t in (")", "}", "]"):
            depth += 1
        elif t in ("(", "{", "["):
            if depth == 0:
                if t == "(" and call_name(tokens, k):
                    return [(call_name(tokens, k), k)]
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
        return []
    calls = []
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
                    calls.append((call_name(tokens, k), k))
                    break
                m += 1
        # A new literal assigned to the same name ends this one's use.
        if (
            tokens[k][0] == "ident"
            and tokens[k][1] in names
            and tokens[k + 1][1] in (":=", "=")
            and tokens[k - 1][1] not in (".", ",")
            and (tokens[k + 2][1] in EXPECTATION_PACKAGES or tokens[k + 2][1] == "[")
        ):
            break
        k += 1
    return calls


# Checks written as code rather than as helper calls: a request whose
# expectation holds a value made afresh at each attempt (echo-basic's retry
# simulation keys its count on a new UUID per probe), a WebSocket dial with
# the messages sent and compared with their echo, and a DNS exchange. The
# reader keeps what such code builds as values of the classes below and the
# scan turns them into cases (`code_statement`, `with_fresh`).

# Calls whose function literal is polled: each run of it is one attempt. The
# number is how many passing attempts in a row the poll wants
# (`http.AwaitConvergence`: the suite's RequiredConsecutiveSuccesses, 3).
POLL_HELPERS = {
    "http.AwaitConvergence": 3,
    "wait.PollUntilContextTimeout": 1,
    "wait.PollImmediate": 1,
    "assert.Eventually": 1,
    "require.Eventually": 1,
}
# Calls that make a new random value each time they run: (import path,
# function) -> the method call that follows (`uuid.New().String()`).
FRESH_CALLS = {
    ("github.com/google/uuid", "New"): ("String",),
    ("github.com/google/uuid", "NewString"): (),
}
URL_PACKAGE = "net/url"
DNS_PACKAGE = "github.com/miekg/dns"
WEBSOCKET_PACKAGE = "golang.org/x/net/websocket"
# Where the reader keeps the struct types a test body declares (`type args
# struct {...}`), whose lower-case names start composite literals.
LOCAL_TYPES = "\0types"
# Where the reader keeps the condition the rest of a loop body runs under
# (`if len(obj.Endpoints) == 0 { continue }`): (the Mutation, its data,
# its text).
GUARD = "\0guard"


class Fresh:
    """A value made anew each time its code runs (`uuid.New().String()`):
    `kind` says what the runner makes (`uuid`), `poll` the enclosing
    POLL_HELPERS call when the code runs per attempt (None: once per case)."""

    def __init__(self, kind, text, poll):
        self.kind = kind
        self.text = text
        self.poll = poll

    def placeholder(self):
        return "{" + self.text + "}"


class Template:
    """Text with parts known only when a request is made: strings, Fresh
    values and Gateway addresses (`path + "?" + values.Encode()`,
    `fmt.Sprintf("ws://%s/ws", gwAddr)`)."""

    def __init__(self, parts):
        out = []
        for part in parts:
            for p in part.parts if isinstance(part, Template) else [part]:
                if isinstance(p, str) and out and isinstance(out[-1], str):
                    out[-1] += p
                elif p != "":
                    out.append(p)
        self.parts = out
        self.text = "".join(p if isinstance(p, str) else getattr(p, "text", "gwAddr") for p in out)


def is_text(value):
    return isinstance(value, (str, Template, Fresh))


class UrlValues(dict):
    """A `url.Values` (key -> list of values)."""


class DnsMessage:
    """A `new(dns.Msg)` with the question `SetQuestion` gave it."""

    def __init__(self):
        self.question = None


class WebSocketCase:
    """A case being read: a WebSocket dial (`<suite>.WebSocketDialer.Dial`),
    the messages sent on it later and whether each reply is compared with
    what was sent. Iterates as the scan's (protocol, case, problem)."""

    def __init__(self, case, problem=None):
        self.case = case
        self.problem = problem
        self.pending = None  # the name holding the last message sent

    def __iter__(self):
        if self.problem:
            return iter(("websocket", None, self.problem))
        messages = self.case.get("arguments", {}).get("messages", [])
        if not messages:
            return iter(("websocket", None, "the dial sends no message this reader knows"))
        unchecked = [n for n, m in enumerate(messages) if not m.get("\0compared")]
        if unchecked:
            return iter(("websocket", None, f"the reply to message {unchecked[0]} is not compared with it"))
        sent = [{k: v for k, v in m.items() if k != "\0compared"} for m in messages]
        return iter(("websocket", {**self.case, "arguments": {**self.case["arguments"], "messages": sent}}, None))


def enclosing_poll(tokens, i):
    """The POLL_HELPERS call whose arguments hold token i, or None."""
    depth = 0
    for k in range(i - 1, 2, -1):
        t = tokens[k][1]
        if t in (")", "}", "]"):
            depth += 1
        elif t in ("(", "{", "["):
            if depth:
                depth -= 1
                continue
            if t == "(" and tokens[k - 1][0] == "ident" and tokens[k - 2][1] == ".":
                helper = f"{tokens[k - 3][1]}.{tokens[k - 1][1]}"
                if helper in POLL_HELPERS:
                    return helper
    return None


def query_escape(text):
    """Go's `url.QueryEscape`."""
    out = []
    for byte in text.encode():
        c = chr(byte)
        if c.isascii() and (c.isalnum() or c in "-_.~"):
            out.append(c)
        elif c == " ":
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def url_values_encode(values):
    """`url.Values.Encode`: keys sorted, each value escaped; a Fresh value
    is inserted as it is (a UUID has nothing to escape)."""
    parts = []
    for key in sorted(values):
        items = values[key] if isinstance(values[key], list) else [values[key]]
        for item in items:
            if isinstance(item, str):
                item = query_escape(item)
            elif not isinstance(item, Fresh):
                return None
            if parts:
                parts.append("&")
            parts.extend([query_escape(key) + "=", item])
    return Template(parts)


def code_value(reader, name, head, rest, path, start, paren, end):
    """What a call the code-written checks use evaluates to (`paren` is
    its `(`, `end` after its `)`): (value, index after it), or None for a
    call this does not read."""
    tokens = reader.t
    if path and (path, rest) in FRESH_CALLS:
        j = end
        for method in FRESH_CALLS[(path, rest)]:
            if not (reader.peek(j)[1] == "." and reader.peek(j + 1)[1] == method and reader.peek(j + 2)[1] == "(" and reader.peek(j + 3)[1] == ")"):
                return None
            j += 4
        return Fresh("uuid", reader.text(start, j), enclosing_poll(tokens, start)), j
    if rest == "Get" and isinstance(reader.env.get(head), UrlValues):
        # `values.Get(k)`: the first value of k, "" when there is none.
        try:
            args = reader.call_values(paren)
        except GoError:
            args = None
        if not args or len(args) != 1 or not isinstance(args[0], str):
            return Unresolved(reader.text(start, end)), end
        found = reader.env[head].get(args[0]) or [""]
        return found[0], end
    if rest == "Encode" and end == paren + 2 and isinstance(reader.env.get(head), UrlValues):
        value = url_values_encode(reader.env[head])
        return (value if value is not None else Unresolved(reader.text(start, end))), end
    if name == "new" and reader.text(paren + 1, end - 1) in ("dns.Msg",) and import_path(reader.env, "dns") == DNS_PACKAGE:
        return DnsMessage(), end
    if path == "fmt" and rest == "Sprintf":
        try:
            values = reader.call_values(paren)
        except GoError:
            return None
        if not values or not isinstance(values[0], str) or not any(isinstance(v, (Template, Fresh, GatewayAddress)) for v in values[1:]):
            return None
        pieces = re.split(r"(%[%sdvq])", values[0])
        args = list(values[1:])
        parts = []
        for piece in pieces:
            if piece == "%%":
                parts.append("%")
            elif piece in ("%s", "%v") and args:
                parts.append(args.pop(0))
            elif piece.startswith("%") and len(piece) == 2:
                return Unresolved(reader.text(start, end)), end
            else:
                parts.append(piece)
        if args or any(not isinstance(p, (str, Template, Fresh, GatewayAddress)) for p in parts):
            return Unresolved(reader.text(start, end)), end
        return Template(parts), end
    return None


def walk_fields(value, fields):
    """`tc.args.path`: the field path into known struct values, or None."""
    for field in fields:
        if not isinstance(value, dict) or field not in value:
            return None
        value = value[field]
    return value


def index_loop(tokens, i, env):
    """`for i := range X {` over a list known here: the `range_loop` shape
    with no value name bound."""
    if not (tokens[i][1] == "for" and tokens[i + 1][0] == "ident" and tokens[i + 2][1] == ":=" and tokens[i + 3][1] == "range"):
        return None
    r = Reader(tokens, env)
    try:
        values, j = r.expr(i + 4)
    except GoError:
        return None
    if not isinstance(values, list) or tokens[j][1] != "{" or unresolved_in(values):
        return None
    return "\0unused", values, j, r.skip_braces(j), tokens[i + 1][1]


def is_statement_start(tokens, i):
    """Whether token i begins a statement (the token before ends one, as
    Go's automatic semicolons put it; keywords that take an expression
    after them do not)."""
    kind, tok = tokens[i - 1]
    if tok in ("{", "}", ")", "]", ";"):
        return True
    return kind in ("ident", "str", "raw", "num", "char") and tok not in (
        "return", "go", "defer", "if", "else", "case", "range", "for", "switch", "select", "var", "const",
    )


def code_statement(tokens, i, env, subtests, state, cases):
    """The statements of the code-written checks at token i: a method that
    changes a value known here (`values.Set(k, v)`, `msg.SetQuestion(name,
    dns.TypeA)`), a WebSocket dial and the messages on it, a DNS exchange.
    Returns the index to go on from, or None when token i starts none."""
    r = Reader(tokens, env)
    tok = tokens[i][1]
    subtest = "/".join(name for _, name in subtests)
    if tokens[i][0] != "ident" or tokens[i - 1][1] == "." or tokens[i + 1][1] != ".":
        return None
    # `values.Set("uuid", uuid.New().String())` on a url.Values.
    if isinstance(env.get(tok), UrlValues) and tokens[i + 2][1] in ("Set", "Add", "Del") and tokens[i + 3][1] == "(":
        end = r.skip_parens(i + 3)
        try:
            args = r.call_values(i + 3)
        except GoError:
            args = None
        values = UrlValues(env[tok])
        if args and isinstance(args[0], str):
            if tokens[i + 2][1] == "Del":
                values.pop(args[0], None)
            elif len(args) == 2 and is_text(args[1]):
                values[args[0]] = ([] if tokens[i + 2][1] == "Set" else list(values.get(args[0], []))) + [args[1]]
            else:
                values = Unresolved(r.text(i, end))
        else:
            values = Unresolved(r.text(i, end))
        env[tok] = values
        return end
    # `msg.SetQuestion(domain, dns.TypeA)`.
    if isinstance(env.get(tok), DnsMessage) and tokens[i + 2][1] == "SetQuestion" and tokens[i + 3][1] == "(":
        end = r.skip_parens(i + 3)
        try:
            args = r.call_values(i + 3)
        except GoError:
            args = None
        message = DnsMessage()
        if args and len(args) == 2 and all(isinstance(a, str) for a in args):
            message.question = {"Name": args[0], "Type": args[1]}
        env[tok] = message
        return end
    # `captured, _, err := rt.CaptureRoundTrip(req)` in a loop run a known
    # number of times, `req` made by `http.MakeRequest`: the loop's
    # requests, each judged as the loop's body judges what it captured.
    last = i
    while tokens[last + 1][1] == "." and tokens[last + 2][0] == "ident":
        last += 2
    # Elsewhere (inside a poll) a captured round trip is judged by the
    # code around it (with_fresh).
    if last > i and tokens[last][1] == "CaptureRoundTrip" and tokens[last + 1][1] == "(" and enclosing_loop(tokens, i, r):
        end = r.skip_parens(last + 1)
        case, problem = capture_loop(tokens, i, last + 1, end, env, subtest)
        cases.append(("http", None if problem else case, problem))
        return end
    path = import_path(env, tok) if tok not in env else None
    # `r, err := dns.Exchange(msg, gwAddr)`: the reply is all the test asks for.
    if path == DNS_PACKAGE and tokens[i + 2][1] == "Exchange" and tokens[i + 3][1] == "(":
        end = r.skip_parens(i + 3)
        args = call_args(tokens, i + 3)
        out = {"helper": "dns.Exchange", "subtest": subtest}
        problem = None
        message = env.get(tokens[args[0][0]][1]) if len(args) == 2 and args[0][1] == args[0][0] + 1 else None
        address = env.get(tokens[args[1][0]][1]) if len(args) == 2 and args[1][1] == args[1][0] + 1 else None
        if not isinstance(message, DnsMessage) or not message.question:
            problem = f"dns.Exchange argument m: {r.text(*args[0]) if args else ''} is not a message with a question read here"
        elif not isinstance(address, GatewayAddress):
            problem = f"dns.Exchange argument a: {r.text(*args[1]) if len(args) > 1 else ''} is computed at run time"
        else:
            out["gateway"] = address.json()
            out["arguments"] = {"question": message.question}
            poll = enclosing_poll(tokens, i)
            if poll:
                out["arguments"]["poll"] = poll
        cases.append(("udp", None if problem else out, problem))
        return end
    # `ws, err := <suite>.WebSocketDialer.Dial(url, protocol, origin)`.
    if tok == env.get(SUITE_PARAM) and tokens[i + 2][1] == "WebSocketDialer" and tokens[i + 3][1] == "." and tokens[i + 4][1] == "Dial" and tokens[i + 5][1] == "(":
        end = r.skip_parens(i + 5)
        args = call_args(tokens, i + 5)
        names = assigned_names(tokens, i)
        case = {"helper": "websocket.Dial", "subtest": subtest}
        problem = None
        try:
            url, j = r.expr(args[0][0]) if args else (None, 0)
        except GoError as e:
            url, j = Unresolved(str(e)), 0
        parts = url.parts if isinstance(url, Template) else []
        if not names or names[0] == "_":
            problem = "the dialed connection is not kept"
        elif not (len(parts) == 3 and parts[0] == "ws://" and isinstance(parts[1], GatewayAddress) and isinstance(parts[2], str) and parts[2].startswith("/")):
            problem = f"websocket.Dial argument url: {r.text(*args[0]) if args else ''} is not ws://<gwAddr>/<path>"
        else:
            case["gateway"] = parts[1].json()
            case["Request"] = {"Path": parts[2]}
            case["arguments"] = {"messages": []}
            poll = enclosing_poll(tokens, i)
            if poll:
                case["arguments"]["poll"] = poll
        dial = WebSocketCase(case, problem)
        if names and names[0] != "_":
            env[names[0]] = dial
        cases.append(dial)
        return end
    # `websocket.Message.Send(ws, m)` and `websocket.Message.Receive(ws, &reply)`.
    if path == WEBSOCKET_PACKAGE and tokens[i + 2][1] in ("Message", "JSON") and tokens[i + 3][1] == "." and tokens[i + 4][1] in ("Send", "Receive") and tokens[i + 5][1] == "(":
        end = r.skip_parens(i + 5)
        args = call_args(tokens, i + 5)
        dial = env.get(tokens[args[0][0]][1]) if len(args) == 2 and args[0][1] == args[0][0] + 1 else None
        if not isinstance(dial, WebSocketCase):
            return end
        if dial.problem:
            return end
        if tokens[i + 2][1] != "Message":
            dial.problem = "a JSON message, which this reader does not read"
            return end
        a, b = args[1]
        if tokens[i + 4][1] == "Send":
            try:
                value, j = r.expr(a)
            except GoError as e:
                value, j = Unresolved(str(e)), a
            if j == b and isinstance(value, str):
                message = {"Text": value}
            elif j == b and isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256 for v in value):
                message = {"Binary": value}
            else:
                dial.problem = f"message {r.text(a, b)} is not text or bytes known here"
                return end
            dial.case["arguments"]["messages"].append(message)
            dial.pending = (tokens[a][1] if b == a + 1 else None, message)
            return end
        reply = tokens[a + 1][1] if tokens[a][1] == "&" and b == a + 2 else None
        if dial.pending and reply:
            sent, message = dial.pending
            message["\0compared"] = compared(tokens, end, sent, reply)
            dial.pending = None
        return end
    return None


def enclosing_loop(tokens, i, r):
    """The `for` loop whose body holds the statement at token i, when it
    runs a known number of times (`for range N`, `for k := range N`, `for
    k := 0; k < N; k++`): (N, the body's `{`, the index after its `}`);
    else None."""
    depth = 0
    for k in range(i - 1, 0, -1):
        t = tokens[k][1]
        if t in (")", "}", "]"):
            depth += 1
        elif t in ("(", "{", "["):
            if depth:
                depth -= 1
                continue
            if t != "{":
                return None
            f = k - 1
            while f > 0 and tokens[f][1] not in ("for", "{", "}"):
                f -= 1
            if tokens[f][1] != "for":
                return None
            head = [tok for _, tok in tokens[f + 1:k]]
            try:
                if head[:1] == ["range"]:
                    n, j = r.expr(f + 2)
                elif len(head) > 3 and head[1] == ":=" and head[2] == "range":
                    n, j = r.expr(f + 4)
                elif len(head) > 7 and head[1:4] == [":=", "0", ";"] and head[4:6] == [head[0], "<"] and head[-3:] == [";", head[0], "++"]:
                    n, j = r.expr(f + 7)
                    j += 3
                else:
                    return None
            except GoError:
                return None
            if j != k or not isinstance(n, int) or isinstance(n, bool):
                return None
            return n, k, r.skip_braces(k)
    return None


def made_request(tokens, name, before, env):
    """The `http.MakeRequest(t, &expected, gwAddr, protocol, scheme)` call
    that last assigned `name` before token `before`: its `(` index, else
    None."""
    for k in range(before - 1, 2, -1):
        if (
            tokens[k][1] == name
            and tokens[k + 1][1] in (":=", "=")
            and tokens[k - 1][1] not in (".", ",")
        ):
            pkg = tokens[k + 2][1]
            # The helper packages are read under their own names
            # (canonical_helper_packages).
            if pkg == "http" and pkg not in env and tokens[k + 3][1] == "." and tokens[k + 4][1] == "MakeRequest" and tokens[k + 5][1] == "(":
                return k + 5
            return None
    return None


def capture_loop(tokens, i, paren, end, env, subtest):
    """The case of `captured, _, err := rt.CaptureRoundTrip(req)` at token
    i, in a loop run N times (enclosing_loop): `{"helper":
    "http.CaptureRoundTrip", ...the request's expectation, "gateway",
    "arguments": {"repeat", "scheme", "podPrefixHeader", "oneValue"}}` when `req` was made by
    `http.MakeRequest`, and every `if` of the loop's body is a judgement
    read here: the round trip's error, `len(v) != 1` and
    `!strings.HasPrefix(captured.Pod, v[0])` of `v :=
    captured.Headers["Name"]` (the pod is prefixed by a request header's
    value as the backend saw it); else (None, why)."""
    r = Reader(tokens, env)
    names = assigned_names(tokens, i)
    args = call_args(tokens, paren)
    if len(names) < 3 or names[0] == "_" or len(args) != 1 or args[0][1] != args[0][0] + 1:
        return None, f"{r.text(i, end)}: the captured request is not kept, or the request is not a name"
    captured, err = names[0], names[2]
    paren = made_request(tokens, tokens[args[0][0]][1], i, env)
    if paren is None:
        return None, f"{r.text(i, end)}: the request is not one http.MakeRequest made"
    made = call_args(tokens, paren)
    if len(made) != 5:
        return None, "http.MakeRequest with other arguments than (t, &expected, gwAddr, protocol, scheme)"
    try:
        expected, j = r.expr(made[1][0])
        scheme, k = r.expr(made[4][0])
    except GoError as e:
        return None, f"http.MakeRequest: {e}"
    if j != made[1][1] or k != made[4][1] or not isinstance(expected, dict) or not isinstance(scheme, str) or unresolved_in(expected):
        return None, f"http.MakeRequest: {r.text(*made[1])} or {r.text(*made[4])} is computed at run time"
    extra, problem = helper_call(tokens, paren, "http.MakeRequest", env)
    if problem:
        return None, problem
    count, body, body_end = enclosing_loop(tokens, i, r)
    header, one_value, prefix = None, False, False
    values = None
    k = body + 1
    while k < body_end - 1:
        t = [tok for _, tok in tokens[k:k + 8]]
        # v := captured.Headers["Name"]
        if len(t) == 8 and t[1] == ":=" and t[2:6] == [captured, ".", "Headers", "["] and tokens[k + 6][0] == "str" and t[7] == "]":
            values, header = t[0], go_string("str", tokens[k + 6][1])
            k += 8
            continue
        if t[0] == "if":
            brace = k + 1
            while tokens[brace][1] != "{":
                brace += 1
            condition = [tok for _, tok in tokens[k + 1:brace]]
            if condition == [err, "!=", "nil"]:
                pass
            elif values and condition == ["len", "(", values, ")", "!=", "1"]:
                one_value = True
            elif values and condition == ["!", "strings", ".", "HasPrefix", "(", captured, ".", "Pod", ",", values, "[", "0", "]", ")"]:
                prefix = True
            else:
                return None, f"the loop judges {' '.join(condition)}, which this reader does not read"
            k = brace + 1
            continue
        k += 1
    if not prefix:
        return None, "the loop judges no pod prefix this reader reads"
    case = {**expected, "helper": "http.CaptureRoundTrip", "subtest": subtest, **extra}
    case["arguments"] = {**case.get("arguments", {}), "repeat": count, "scheme": scheme, "podPrefixHeader": header, "oneValue": one_value}
    return case, None


def compared(tokens, start, a, b):
    """Whether the tokens after `start` (to the end of their block) compare
    the names a and b for equality (`a != b`, `a == b`, `bytes.Equal(a,
    b)`, either order)."""
    if not a or not b:
        return False
    depth = 0
    for k in range(start, len(tokens) - 5):
        t = tokens[k][1]
        depth += {"{": 1, "}": -1}.get(t, 0)
        if depth < 0:
            return False
        pair = {tokens[k][1], tokens[k + 2][1]}
        if tokens[k + 1][1] in ("!=", "==") and pair == {a, b} and tokens[k - 1][1] != ".":
            return True
        if t == "Equal" and tokens[k - 1][1] == "." and tokens[k - 2][1] in ("bytes", "reflect") and tokens[k + 1][1] == "(":
            if {tokens[k + 2][1], tokens[k + 4][1]} == {a, b} and tokens[k + 3][1] == ",":
                return True
    return False


def package_statement(tokens, i, env, subtests, state):
    """A call of a function of the test package as a statement, at token
    i (`assertConsistentRetryBehaviour(t, suite, gwAddr, ...)`): its body
    read there with its parameters bound, as a local function's; its cases
    and checks are the caller's. None when token i is no such call."""
    tok = tokens[i][1]
    funcs = env.get(PACKAGE, {}).get("funcs", {})
    if not (
        tokens[i][0] == "ident"
        and tokens[i + 1][1] == "("
        and tokens[i - 1][1] != "."
        and tok not in env
        and tok in funcs
        and is_statement_start(tokens, i)
    ):
        return None
    ftokens, params, fbody, fbody_end, fimports = funcs[tok]
    if ftokens[fbody + 1][1] == "return" or tok in state.setdefault("\0calling", set()):
        return None
    r = Reader(tokens, env)
    bound = {}
    for name, (a, b) in zip(params, call_args(tokens, i + 1)):
        try:
            value, j = r.expr(a)
            bound[name] = value if j == b else Unresolved(r.text(a, b))
        except GoError:
            bound[name] = Unresolved(r.text(a, b))
        # The suite handed on keeps its name's meaning in the callee.
        if b == a + 1 and tokens[a][1] == env.get(SUITE_PARAM):
            bound[SUITE_PARAM] = name
            bound.pop(name, None)
    inner = {IMPORTS: fimports, PACKAGE: env[PACKAGE], SUITE_PARAM: env.get(SUITE_PARAM), **bound}
    # The caller's sub-tests enclose the whole body (their token indices
    # are the caller's).
    outer = [(float("inf"), name) for _, name in subtests]
    state["\0calling"].add(tok)
    try:
        # Padded: the scan looks a few tokens ahead, and a function may end
        # its file.
        found = scan_body(ftokens + [("eof", "")] * 8, fbody + 1, fbody_end - 1, inner, outer, state)
    finally:
        state["\0calling"].discard(tok)
    return r.skip_parens(i + 1), found


def with_fresh(value):
    """A case with its Fresh values written as placeholders in the text
    that holds them (`{uuid.New().String()}`), and `per_attempt` (made
    anew for every attempt of the poll around them) or `per_case` (once
    per case): placeholder -> kind. Other values are left as they are."""
    fresh = {}

    def walk(v):
        if isinstance(v, (Template, Fresh)):
            parts = v.parts if isinstance(v, Template) else [v]
            if not all(isinstance(p, (str, Fresh)) for p in parts):
                return v
            for p in parts:
                if isinstance(p, Fresh):
                    fresh[p.placeholder()] = p
            return "".join(p if isinstance(p, str) else p.placeholder() for p in parts)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    out = walk(value)
    if fresh and isinstance(out, dict):
        per_attempt = {k: f.kind for k, f in fresh.items() if f.poll}
        per_case = {k: f.kind for k, f in fresh.items() if not f.poll}
        if per_attempt:
            out["per_attempt"] = per_attempt
        if per_case:
            out["per_case"] = per_case
    return out



def reader_index(self, value, i):
    """`testCases[i]`, `tc.args.path` after an index: the element or field
    of a value known here, from token i on; the value as it is when token
    i starts neither."""
    while True:
        if self.peek(i)[1] == "[" and isinstance(value, (list, dict)):
            try:
                key, j = self.expr(i + 1)
            except GoError:
                return value, i
            if self.peek(j)[1] != "]":
                return value, i
            if isinstance(value, list) and isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(value):
                value = value[key]
            elif isinstance(value, dict) and isinstance(key, str) and key in value:
                value = value[key]
            else:
                return Unresolved(self.text(i, j + 1)), j + 1
            i = j + 1
        elif (
            self.peek(i)[1] == "."
            and self.peek(i + 1)[0] == "ident"
            and self.peek(i + 2)[1] != "("
            and isinstance(value, dict)
            and self.peek(i + 1)[1] in value
        ):
            value = value[self.peek(i + 1)[1]]
            i += 2
        else:
            return value, i


Reader.index = reader_index

def port(upstream, out_dir=None):
    """Returns {file name: JSON text} for the data directory."""
    tests_dir = os.path.join(upstream, "conformance", "tests")
    base = open(os.path.join(upstream, "conformance", "base", "manifests.yaml")).read()
    manifests = base + "".join(
        open(os.path.join(tests_dir, f)).read() for f in sorted(os.listdir(tests_dir)) if f.endswith(".yaml")
    )
    sources = "".join(open(os.path.join(tests_dir, f)).read() for f in sorted(os.listdir(tests_dir)) if f.endswith(".go"))
    for name, value in SUITE_CONSTANTS.items():
        if name in sources and value not in manifests:
            raise SystemExit(f"{name} = {value!r} is in no manifest of conformance/base or conformance/tests: the suite constants changed upstream; update SUITE_CONSTANTS")
    source = ""
    source_file = os.path.join(upstream, "SOURCE.txt")
    if os.path.exists(source_file):
        source = open(source_file).read().splitlines()[0]
    files = {}
    index = {"source": source, "tests": {}, "unported": {}}
    go_files = sorted(f for f in os.listdir(tests_dir) if f.endswith(".go"))
    parsed = {}
    imports = {}
    all_tokens = {}
    for f in go_files:
        tokens = tokenize(open(os.path.join(tests_dir, f)).read())
        imports[f] = read_imports(tokens)
        tokens = canonical_helper_packages(tokens, imports[f])
        all_tokens[f] = tokens
        for var, (start, end) in find_tests(tokens).items():
            parsed[var] = (f, tokens, test_fields(tokens, start, end))
    package = load_package([(all_tokens[f], imports[f]) for f in go_files])
    for var in sorted(parsed, key=lambda v: (parsed[v][0], v)):
        f, tokens, fields = parsed[var]
        short = fields.get("ShortName")
        if not isinstance(short, str):
            index["unported"][var] = f"{f}: ShortName is not a string literal"
            continue
        test = fields.get("Test")
        body_tokens, body, body_file = tokens, None, f
        if test and test[0] == "func":
            body = (test[1], test[2])
        elif test and test[0] == "ref":
            ref = test[1].removesuffix(".Test")
            if ref in parsed and parsed[ref][2].get("Test", ("",))[0] == "func":
                body_file, body_tokens, ref_fields = parsed[ref]
                body = (ref_fields["Test"][1], ref_fields["Test"][2])
        if body is None:
            index["unported"][short] = f"{f}: its Test is not a function literal here ({test})"
            continue
        env = {IMPORTS: imports[body_file], PACKAGE: package, SUITE_PARAM: suite_parameter(body_tokens, body[0])}
        state = {"changed": None, "steps": []}
        found, gateways, found_checks = scan_body(body_tokens, *body, env, state=state)
        early_returns = returns_when(body_tokens, body[0], env[SUITE_PARAM])
        checks = [c for c in found_checks if "reason" not in c]
        unported_checks = [c for c in found_checks if "reason" in c]
        cases, unported_cases = [], []
        case_index = {}
        for n, entry in enumerate(found):
            protocol, value, error = entry
            problem = error or (unresolved_in(value) and "{}: {} is computed at run time".format(*unresolved_in(value)))
            if not problem:
                value = with_fresh(with_secrets(value))
                if not json_value(value):
                    problem = "a field holds a Gateway address, which the case's `gateway` carries only as the helper's gwAddr"
            if problem:
                unported_cases.append({"index": n, "protocol": protocol, "reason": problem})
            else:
                case_index[id(entry)] = len(cases)
                cases.append({"protocol": protocol, **value})
        check_index = {id(c): n for n, c in enumerate(checks)}
        steps = []
        for what, item in state["steps"]:
            if what == "change":
                steps.append(item)
            elif what == "case" and id(item) in case_index:
                steps.append({"case": case_index[id(item)]})
            elif what == "check" and id(item) in check_index:
                steps.append({"check": check_index[id(item)]})
        manifests = fields.get("Manifests", [])
        data = {
            "name": short,
            "provisional": fields.get("Provisional") is True,
            "description": fields.get("Description", ""),
            "source": f"conformance/tests/{f}",
            "features": [symbol(v) for v in fields.get("Features", [])] if isinstance(fields.get("Features"), list) else [],
            "manifests": manifests if isinstance(manifests, list) else [],
            "gateways": gateways,
            "cases": cases,
            "unported_cases": unported_cases,
            "checks": checks,
            "unported_checks": unported_checks,
        }
        if early_returns:
            data["returns_when"] = early_returns
        if any("change" in step for step in steps):
            data["steps"] = steps
        if not found and not found_checks:
            used = sorted({t[1] for t in body_tokens[body[0]:body[1]] if t[0] == "ident" and t[1] in ("tls", "grpc", "tcp", "udp", "http", "kubernetes")})
            index["unported"][short] = (
                f"{f}: no ExpectedResponse literal (the test checks {', '.join(used) or 'nothing ported'} "
                "through helper calls or status conditions only)"
            )
            continue
        files[f"{short}.json"] = json.dumps(data, indent=2, sort_keys=True) + "\n"
        index["tests"][short] = {
            "file": f"{short}.json",
            "cases": len(cases),
            "unported_cases": len(unported_cases),
            "checks": len(checks),
            "unported_checks": len(unported_checks),
        }
    total = {k: sum(t[k] for t in index["tests"].values()) for k in ("cases", "unported_cases", "checks", "unported_checks")}
    index["summary"] = (
        f"{len(index['tests'])} tests with {total['cases']} cases and {total['checks']} status checks ported "
        f"({total['unported_cases']} cases and {total['unported_checks']} checks not), {len(index['unported'])} tests not ported"
    )
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
