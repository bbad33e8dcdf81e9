"""The chart rendered, and lookups in what it renders.

`render_chart` runs the real `helm template`; `render` is a tiny interpreter of the template
forms the chart allows, anything else fails."""

from __future__ import annotations

import re
from pathlib import Path

from tests.crdcheck import load_docs

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sedna"
RELEASE = {"Namespace": "sedna", "Name": "sedna", "Service": "Helm"}
_ACTION = re.compile(r"(\n?[ \t]*)?\{\{(-?)\s*(.*?)\s*(-?)\}\}")


def _go_string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<no value>"
    return str(value)


def _lookup(expr: str, scope: dict):
    root, *keys = expr.lstrip(".").split(".")
    node = scope[root]
    for key in keys:
        node = node[key]
    return node


def _pipeline(text: str, scope: dict) -> str:
    head, *funcs = [p.strip() for p in text.split("|")]
    if not head.startswith("."):
        raise ValueError(f"unsupported template expression {text!r}")
    value = _lookup(head, scope)
    for func in funcs:
        if func != "quote":
            raise ValueError(f"unsupported template function {func!r}")
        value = '"' + _go_string(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _go_string(value)


def render(template: str, values: dict, chart: dict) -> str:
    """Render the Helm template subset the chart uses: `{{ .Values.x }}`, `.Release.*`,
    `.Chart.*`, `| quote`, `{{- if .Values.x }} ... [{{- else }} ...] {{- end }}` and `-` trimming."""
    scope = {"Values": values, "Release": RELEASE, "Chart": {k[0].upper() + k[1:]: v for k, v in chart.items()}}
    out, pos, stack = [], 0, []
    for m in _ACTION.finditer(template):
        lead, trim_left, body, trim_right = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        text = template[pos:m.start()]
        if not trim_left:
            text += lead
        if all(stack):
            out.append(text)
        pos = m.end()
        if trim_right:
            while pos < len(template) and template[pos] in " \t\n":
                pos += 1
        if body.startswith("if "):
            stack.append(bool(_lookup(body[3:].strip(), scope)) and all(stack))
        elif body == "else":
            stack[-1] = all(stack[:-1]) and not stack[-1]
        elif body == "end":
            stack.pop()
        elif all(stack):
            out.append(_pipeline(body, scope))
    assert not stack, "unterminated if"
    out.append(template[pos:])
    return "".join(out)


def render_chart(**overrides) -> dict[str, list[dict]]:
    """The chart rendered by the real `helm template` (top-level values replaced by
    `overrides`), as template file name -> documents."""
    from tests.helm.helmbin import helm_template

    rendered = {path.name: [] for path in sorted((CHART / "templates").glob("*.yaml"))}
    for name, text in helm_template(CHART, overrides, namespace=RELEASE["Namespace"]).items():
        rendered[name] = load_docs(text)
    return rendered


def _one(rendered: dict, kind: str) -> dict:
    [obj] = [d for docs in rendered.values() for d in docs if d["kind"] == kind]
    return obj


def _allowed(role: dict, group: str, resource: str) -> set[str]:
    return {verb for rule in role["rules"] if group in rule["apiGroups"] and resource in rule["resources"]
            for verb in rule["verbs"]}
