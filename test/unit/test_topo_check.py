#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks fccl-topo's machine-readable outputs.

  --json: validated against test/data/topo/schema.json (JSON Schema draft 2020-12) by python3-jsonschema; every
          keyword the schema uses must be one of the draft's, so a misspelt keyword cannot silently mean less.
  --xml:  checked against what NCCL's topology XML reader (src/graph/xml.cc) accepts: no prolog or comments,
          attributes separated by single spaces, "/>" right after the last attribute, and the attributes NCCL's
          topology builder (src/graph/topo.cc) reads without a default on each element.

  test_topo_check.py --schema schema.json --goldens test/data/topo   the *.json.golden and *.xml.golden files
  test_topo_check.py --schema schema.json --run build/tools/fccl-topo   the program on this machine, live

Before checking anything the validators are shown documents they must reject; a validator that accepts everything
fails the test. Without python3-jsonschema (scripts/install-deps installs it) the test is skipped (exit 77).
"""
import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

try:
    import jsonschema
except ImportError:
    jsonschema = None

# ---- JSON Schema ------------------------------------------------------------------------------------------------

# The keywords of draft 2020-12's vocabularies (core, applicator, unevaluated, validation, meta-data, format,
# content). Anything else in the schema is a mistake: validators ignore unknown keywords.
DRAFT_2020_12_KEYWORDS = {
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary", "$comment", "$defs",
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "prefixItems", "items", "contains",
    "properties", "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "maxProperties", "minProperties", "required", "dependentRequired", "title", "description",
    "default", "deprecated", "readOnly", "writeOnly", "examples", "format", "contentEncoding", "contentMediaType",
    "contentSchema",
}
# Members whose values are maps from names to schemas, not schemas themselves.
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "dependentSchemas"}


class SchemaError(Exception):
    pass


def unknown_keywords(schema, path="$"):
    """Keywords outside the draft anywhere in the schema, as 'path: keyword' strings."""
    found = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key not in DRAFT_2020_12_KEYWORDS:
                found.append("%s: %s" % (path, key))
            elif key in SCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    found += unknown_keywords(sub, "%s.%s.%s" % (path, key, name))
            elif isinstance(value, (dict, list)) and key not in ("enum", "const", "examples", "default", "required"):
                found += unknown_keywords(value, "%s.%s" % (path, key))
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            found += unknown_keywords(item, "%s[%d]" % (path, i))
    return found


def make_validator(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    unknown = unknown_keywords(schema)
    if unknown:
        raise SchemaError("keywords that are not JSON Schema draft 2020-12's: %s" % ", ".join(unknown))
    # "$id" names the schema ("fccl-topo/1"); it is not a URL to resolve the local "#/$defs/..." references against
    # (python3-jsonschema 4.10, Debian 12's, would try), so the validator gets the schema without it.
    local = dict(schema)
    local.pop("$id", None)
    return jsonschema.Draft202012Validator(local)


def validate(instance, validator):
    """Returns a list of error strings (empty: valid)."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    return ["%s: %s" % ("$" + "".join("[%d]" % p if isinstance(p, int) else ".%s" % p for p in e.absolute_path),
                        e.message) for e in errors]


def check_json(text, validator, what):
    try:
        document = json.loads(text)
    except ValueError as e:
        return ["%s: not JSON: %s" % (what, e)]
    errors = validate(document, validator)
    if isinstance(document, dict):
        errors += consistency(document)
    return ["%s: %s" % (what, e) for e in errors]


def consistency(doc):
    """What a schema cannot say: the matrix is square and matches the GPUs, peers cover every ordered pair."""
    errors = []
    n = len(doc.get("gpus", []))
    rows = doc.get("matrix", {}).get("rows", [])
    if len(rows) != n or any(len(r) != n for r in rows):
        errors.append("matrix is not %dx%d" % (n, n))
    for i, row in enumerate(rows):
        if i < len(row) and row[i] != "X":
            errors.append("matrix[%d][%d] is %r, not X" % (i, i, row[i]))
    pairs = {(p.get("from"), p.get("to")) for p in doc.get("peers", [])}
    expected = {(i, j) for i in range(n) for j in range(n) if i != j}
    if pairs != expected:
        errors.append("peers do not cover every ordered GPU pair exactly once")
    if n == 0 and not any("no GPU found" in note for note in doc.get("notes", [])):
        errors.append("no GPU, but no note says 'no GPU found'")
    for g, gpu in enumerate(doc.get("gpus", [])):
        if gpu.get("index") != g:
            errors.append("gpus[%d].index is %r" % (g, gpu.get("index")))
    return errors


def json_self_test(validator, sample):
    """The validator must reject broken variants of a valid document."""
    doc = json.loads(sample)
    breakages = [
        ("schema version", lambda d: d.__setitem__("schema", "fccl-topo/2")),
        ("missing member", lambda d: d.pop("notes")),
        ("unknown member", lambda d: d.__setitem__("extra", 1)),
        ("wrong type", lambda d: d["host"].__setitem__("pus", "many")),
        ("bool for int", lambda d: d["host"].__setitem__("cores", True)),
        ("bad enum", lambda d: d["source"].__setitem__("host", "elsewhere")),
        ("bad pattern", lambda d: d["host"]["numa_nodes"][0].__setitem__("cpus", "0-1;2")),
        ("below minimum", lambda d: d["host"].__setitem__("pus", -1)),
        ("nested unknown", lambda d: d["host"]["pci"][0].__setitem__("colour", "red")),
        ("matrix shape", lambda d: d["matrix"]["rows"].append(["X"])),
    ]
    failures = []
    for name, breaker in breakages:
        broken = copy.deepcopy(doc)
        breaker(broken)
        if not check_json(json.dumps(broken), validator, name):
            failures.append("the JSON validator accepted a document with a %s" % name)
    return failures


# ---- NCCL topology XML ------------------------------------------------------------------------------------------

TAG = re.compile(r'^ *<(/?)([a-z]+)((?: [a-z_]+="[^"]*")*)(/?)>$')
ATTR = re.compile(r' ([a-z_]+)="([^"]*)"')
BUSID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HEXCLASS = re.compile(r"^0x[0-9a-f]{6}$")
HEX16 = re.compile(r"^0x[0-9a-f]{4}$")
INT = re.compile(r"^-?[0-9]+$")
CPUMAP = re.compile(r"^[0-9a-f]{8}(,[0-9a-f]{8})*$")
SPEEDS = {"", "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"}
CHILDREN = {"system": {"cpu"}, "cpu": {"pci", "nic"}, "pci": {"pci", "gpu", "nic"}, "gpu": {"nvlink"},
            "nic": {"net"}, "nvlink": set(), "net": set()}
MAX_STR_LEN = 255   # NCCL's limit for names and values
MAX_ATTR_COUNT = 16


def check_element(tag, attrs):
    """The attributes NCCL reads with xmlGetAttrStr/xmlGetAttrInt (no default) must be present and well formed."""
    errors = []

    def need(name, pattern=None, allowed=None):
        if name not in attrs:
            errors.append("<%s> lacks %s" % (tag, name))
        elif pattern is not None and not pattern.match(attrs[name]):
            errors.append("<%s %s=%r> is malformed" % (tag, name, attrs[name]))
        elif allowed is not None and attrs[name] not in allowed:
            errors.append("<%s %s=%r> is not one of %s" % (tag, name, attrs[name], sorted(allowed)))

    if tag == "system":
        need("version", allowed={"1"})
    elif tag == "cpu":
        need("numaid", INT)
        need("arch", allowed={"x86_64", "arm64", "ppc64"})
        if "affinity" in attrs and not CPUMAP.match(attrs["affinity"]):
            errors.append("<cpu affinity=%r> is not a sysfs cpumap" % attrs["affinity"])
        for name in ("familyid", "modelid"):
            if name in attrs and not INT.match(attrs[name]):
                errors.append("<cpu %s=%r> is not a number" % (name, attrs[name]))
    elif tag == "pci":
        need("busid", BUSID)
        need("class", HEXCLASS)
        need("link_speed", allowed=SPEEDS)
        need("link_width", re.compile(r"^([0-9]+)?$"))
        for name in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
            if name in attrs and not HEX16.match(attrs[name]):
                errors.append("<pci %s=%r> is malformed" % (name, attrs[name]))
    elif tag == "gpu":
        for name in ("dev", "sm", "rank", "gdr"):
            need(name, INT)
    elif tag == "nvlink":
        need("target", re.compile(r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|fffffff:ffff:ff)$"))
        need("count", re.compile(r"^[1-9][0-9]*$"))
        need("tclass", re.compile(r"^0x(068000|068001|03[0-9a-f]{4})$"))
    return errors


def check_nccl_xml(text, what):
    errors = []
    if not text.startswith("<system "):
        errors.append("does not start with <system (NCCL's reader takes no prolog)")
    stack = []
    seen_system = False
    for number, line in enumerate(text.splitlines(), 1):
        m = TAG.match(line)
        if not m:
            errors.append("line %d: not one tag in NCCL's strict form: %r" % (number, line))
            continue
        closing, tag, attr_text, self_closing = m.groups()
        if tag not in CHILDREN:
            errors.append("line %d: unknown element <%s>" % (number, tag))
            continue
        if closing:
            if not stack or stack[-1] != tag:
                errors.append("line %d: </%s> closes %s" % (number, tag, stack[-1] if stack else "nothing"))
            else:
                stack.pop()
            continue
        attrs = dict(ATTR.findall(attr_text))
        if len(ATTR.findall(attr_text)) != len(attrs):
            errors.append("line %d: an attribute appears twice" % number)
        if len(attrs) > MAX_ATTR_COUNT:
            errors.append("line %d: more than %d attributes" % (number, MAX_ATTR_COUNT))
        if any(len(v) > MAX_STR_LEN for v in attrs.values()):
            errors.append("line %d: a value longer than %d characters" % (number, MAX_STR_LEN))
        if stack and tag not in CHILDREN[stack[-1]]:
            errors.append("line %d: <%s> inside <%s>" % (number, tag, stack[-1]))
        if not stack:
            if tag != "system" or seen_system:
                errors.append("line %d: <%s> at the top level" % (number, tag))
            seen_system = True
        errors += ["line %d: %s" % (number, e) for e in check_element(tag, attrs)]
        if not self_closing:
            stack.append(tag)
    if stack:
        errors.append("unclosed <%s>" % "><".join(stack))
    try:
        ET.fromstring(text)
    except ET.ParseError as e:
        errors.append("not well-formed XML: %s" % e)
    return ["%s: %s" % (what, e) for e in errors]


def xml_self_test():
    good = ('<system version="1">\n  <cpu numaid="0" arch="x86_64">\n'
            '    <pci busid="0000:18:00.0" class="0x030200" link_speed="" link_width="">\n'
            '      <gpu dev="0" sm="90" rank="0" gdr="1">\n'
            '        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>\n'
            '      </gpu>\n    </pci>\n  </cpu>\n</system>\n')
    failures = []
    if check_nccl_xml(good, "good"):
        failures.append("the NCCL XML check rejects a valid document: %s" % check_nccl_xml(good, "good"))
    broken = [
        ("a prolog", '<?xml version="1.0"?>\n' + good),
        ("a space before />", good.replace('tclass="0x068000"/>', 'tclass="0x068000" />')),
        ("a missing link_width", good.replace(' link_width=""', "")),
        ("a missing gdr", good.replace(' gdr="1"', "")),
        ("a bad bus id", good.replace("0000:18:00.0", "0000:18:00")),
        ("a gpu outside pci", good.replace("<pci busid", "<nic busid").replace("</pci>", "</nic>")),
        ("an unclosed element", good.replace("</system>\n", "")),
        ("two attributes on one space", good.replace('dev="0" sm', 'dev="0"  sm')),
    ]
    for name, text in broken:
        if not check_nccl_xml(text, name):
            failures.append("the NCCL XML check accepted a document with %s" % name)
    return failures


# ---- driver ---------------------------------------------------------------------------------------------------------

def run(argv):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=100)
    return result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", required=True)
    parser.add_argument("--goldens", help="directory holding *.json.golden and *.xml.golden")
    parser.add_argument("--run", help="fccl-topo to run on this machine")
    args = parser.parse_args()
    if jsonschema is None:
        print("topo_check: skipped: python3-jsonschema is not installed (scripts/install-deps installs it)")
        return 77
    with open(args.schema) as f:
        schema = json.load(f)
    validator = make_validator(schema)
    failures = []
    checked = 0
    samples = []
    if args.goldens:
        json_files = sorted(glob.glob(os.path.join(args.goldens, "*.json.golden")))
        xml_files = sorted(glob.glob(os.path.join(args.goldens, "*.xml.golden")))
        if not json_files or not xml_files:
            failures.append("no golden files under %s" % args.goldens)
        for path in json_files:
            with open(path) as f:
                text = f.read()
            samples.append(text)
            failures += check_json(text, validator, os.path.basename(path))
            checked += 1
        for path in xml_files:
            with open(path) as f:
                failures += check_nccl_xml(f.read(), os.path.basename(path))
            checked += 1
    if args.run:
        code, out, err = run([args.run, "--json"])
        if code != 0:
            failures.append("fccl-topo --json exited %d: %s" % (code, err.strip()))
        else:
            samples.append(out)
            failures += check_json(out, validator, "fccl-topo --json")
        checked += 1
        code, out, err = run([args.run, "--xml"])
        if code != 0:
            failures.append("fccl-topo --xml exited %d: %s" % (code, err.strip()))
        else:
            failures += check_nccl_xml(out, "fccl-topo --xml")
        checked += 1
        code, out, err = run([args.run])
        if code != 0 or not out.startswith("fccl-topo: ") or "\nfccl\n" not in out:
            failures.append("fccl-topo exited %d or its report is incomplete: %s" % (code, err.strip()))
        checked += 1
        code, out, err = run([args.run, "--frobnicate"])
        if code != 2 or "unknown option" not in err:
            failures.append("fccl-topo --frobnicate exited %d (expected 2 with a message)" % code)
        checked += 1
    # The validators themselves, on documents they must reject.
    with_pci = [s for s in samples if json.loads(s)["host"]["pci"]]
    if not with_pci:
        failures.append("no JSON sample with a PCI tree to test the validator on")
    else:
        failures += json_self_test(validator, with_pci[0])
    failures += xml_self_test()
    for failure in failures:
        print("FAIL " + failure)
    print("topo_check: %d outputs checked, %d failures" % (checked, len(failures)))
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (SchemaError, jsonschema.exceptions.SchemaError if jsonschema else SchemaError) as e:
        print("FAIL schema: %s" % e)
        sys.exit(1)
