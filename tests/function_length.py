"""No function (or lambda) in the library or the CLI over MAX_LINES lines, checked by CTest:
    python3 function_length.py <repo>/src/tower <repo>/apps
A body is a brace pair whose opening follows a parameter list (optionally with qualifiers, a
trailing return type or a constructor's initializers) or a lambda's capture, and not a control
statement; it is counted from its opening line to its closing line. A lambda counts in the
function around it as well as on its own."""
import pathlib
import re
import sys

MAX_LINES = 80
CONTROL = re.compile(r"^(if|else|for|while|switch|catch|do|try)\b")
HEAD = re.compile(r"(\)|\])\s*(const|override|final|noexcept|mutable|\s)*(->\s*[\w:<>,&*\s]+)?$")


def blank_literals(text):
    """The text with comments, strings and character literals turned into spaces (lines kept)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])*\'',
                         re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def bodies(text):
    """(first line, last line, head) of every function or lambda body in the source text."""
    code = blank_literals(text)
    stack, found, head_start, line = [], [], 0, 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            head = " ".join(code[head_start:i].split())
            initializers = re.sub(r"\)\s*:\s*[\w:]+[({].*$", ")", head)  # Ctor(...) : a(x), b{y}
            is_body = not CONTROL.match(head) and (HEAD.search(head) or HEAD.search(initializers))
            stack.append((line, head if is_body else None))
            head_start = i + 1
        elif c == "}":
            if stack:
                first, head = stack.pop()
                if head is not None:
                    found.append((first, line, head))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return found


def main(dirs):
    errors = []
    count = 0
    for d in dirs:
        for path in sorted(pathlib.Path(d).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".cuh"):
                continue
            for first, last, head in bodies(path.read_text()):
                count += 1
                if last - first + 1 > MAX_LINES:
                    errors.append(f"  {path}:{first}: {last - first + 1} lines: {head[-70:]}")
    if errors:
        print(f"functions over {MAX_LINES} lines:\n" + "\n".join(errors))
        return 1
    print(f"{count} functions and lambdas, none over {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
