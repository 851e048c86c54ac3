"""Prints gin files' statements as PyPI's gin-config parses them, in the
form tests/gin/dump_gin prints ours: one JSON object per line."""
import json
import sys

from gin import config_parser


class Reference:
    def __init__(self, name, evaluate):
        self.text = "@" + name + ("()" if evaluate else "")

    def __repr__(self):
        return self.text


class Macro:
    def __init__(self, name):
        self.text = "%" + name

    def __repr__(self):
        return self.text


class Delegate(config_parser.ParserDelegate):
    def configurable_reference(self, scoped_name, evaluate):
        return Reference(scoped_name, evaluate)

    def macro(self, macro_name):
        return Macro(macro_name)


for path in sys.argv[1:]:
    with open(path) as f:
        for st in config_parser.ConfigParser(f, Delegate()):
            line = {"line": st.location.line_num}
            if isinstance(st, config_parser.BindingStatement):
                line.update(kind="binding", scope=st.scope, selector=st.selector, arg=st.arg_name,
                            value=repr(st.value))
            elif isinstance(st, config_parser.ImportStatement):
                line.update(kind="import", module=st.module, is_from=st.is_from, alias=st.alias or "")
            elif isinstance(st, config_parser.IncludeStatement):
                line.update(kind="include", file=st.filename)
            else:
                continue  # a block's declaration: its bindings follow
            print(json.dumps(line, separators=(",", ":")))
