"""Checks the documentation (//tests/docs:docs_test).

links ROOT FILE...: every relative Markdown link [text](target) in FILEs
  (outside fenced code) names a file that exists under ROOT, and, with a
  #fragment, a heading of that file whose GitHub anchor is the fragment.
  Prints each bad link; exits 1 when there is one.
blocks FILE NAME: prints the fenced blocks of FILE that follow a line
  "<!-- doctest: NAME -->", in order, as one script.
options HELP_FILE PAGE: the options `rdzvd --help` printed (HELP_FILE)
  and those PAGE's option table documents (the `--NAME`s in its rows'
  first column) are the same set, each documented once, with the same
  variable (second column) and default (third; empty for none) as
  --help, which prints config.c's one table. Prints what differs; exits 1
  when anything does.
statuses HEADER PAGE: every status X(NAME, ...) of HEADER (error.h) has a
  row in PAGE naming `RDZV_NAME`, and PAGE names no status HEADER lacks.
libraries PAGE DEPS_SCRIPT BINARY...: PAGE's table of libraries (its rows
  "| name | for | `debian-dev`, `debian-run` | ... | `soname` |") names
  every shared library the BINARYs need (readelf's NEEDED, but the dynamic
  loader) by soname; the "glibc X.Y or later" row states the highest
  GLIBC_ symbol version they use (objdump -T); and every Debian build
  package of the table is in DEPS_SCRIPT (tools/install-deps.sh).
commands HELP_FILE PAGE: every command `rdzvctl help` lists (HELP_FILE:
  its lines "  NAME ...") is named in PAGE as `NAME` or `NAME ...`.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    h = heading.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def prose_lines(path: str):
    fence = False
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if line.startswith('```'):
                fence = not fence
                continue
            if not fence:
                yield n, line


def anchors(path: str) -> set:
    out = set()
    for _, line in prose_lines(path):
        m = re.match(r'^#{1,6} (.*)$', line)
        if m:
            out.add(anchor(m.group(1)))
    return out


def links(root: str, files: list) -> int:
    bad = 0
    checked = 0
    for f in files:
        for n, line in prose_lines(os.path.join(root, f)):
            for target in LINK.findall(line):
                if re.match(r'^[a-z]+:', target):
                    print(f'{f}:{n}: a link out of the repository: {target}')
                    bad += 1
                    continue
                path, _, frag = target.partition('#')
                full = os.path.normpath(os.path.join(root, os.path.dirname(f),
                                                     path)) if path else \
                    os.path.join(root, f)
                checked += 1
                if not os.path.exists(full):
                    print(f'{f}:{n}: {target}: no such file')
                    bad += 1
                elif frag and full.endswith('.md') and \
                        frag not in anchors(full):
                    print(f'{f}:{n}: {target}: no such heading')
                    bad += 1
    print(f'{checked} links checked in {len(files)} files, {bad} bad')
    return 1 if bad or checked == 0 else 0


def blocks(path: str, name: str) -> int:
    text = open(path, encoding='utf-8').read()
    found = re.findall(r'<!-- doctest: ' + re.escape(name) +
                       r' -->\n```[a-z]*\n(.*?)```', text, re.S)
    if not found:
        print(f'{path}: no block marked "doctest: {name}"', file=sys.stderr)
        return 1
    sys.stdout.write(''.join(found))
    return 0


def options(help_file: str, page: str) -> int:
    # --help's rows: "  --NAME  VARIABLE  default VALUE  meaning", columns
    # padded with spaces; "" is an empty default.
    helped = {}
    for line in open(help_file, encoding='utf-8'):
        m = re.match(r'^  --([a-z0-9-]+) +(RDZVD_[A-Z0-9_]+) +default (\S+)',
                     line)
        if m:
            dflt = '' if m.group(3) == '""' else m.group(3)
            helped[m.group(1)] = (m.group(2), dflt)
    # The page's rows: "| `--NAME` | `VARIABLE` | default | meaning |".
    documented = []
    rows = {}
    for _, line in prose_lines(page):
        if line.startswith('| `--'):
            cells = [c.strip() for c in line.split('|')[1:-1]]
            names = re.findall(r'`--([a-z0-9-]+)`', cells[0])
            documented += names
            if len(cells) >= 3:
                for n in names:
                    rows[n] = (cells[1].strip('`'), cells[2])
    bad = 0
    for name in sorted(set(helped) - set(documented)):
        print(f'--{name}: in rdzvd --help, not in {page}')
        bad += 1
    for name in sorted(set(documented) - set(helped)):
        print(f'--{name}: in {page}, not in rdzvd --help')
        bad += 1
    for name in sorted({n for n in documented if documented.count(n) > 1}):
        print(f'--{name}: documented {documented.count(name)} times in {page}')
        bad += 1
    for name in sorted(set(helped) & set(rows)):
        if helped[name][0] != rows[name][0]:
            print(f'--{name}: variable {helped[name][0]} in --help, '
                  f'{rows[name][0] or "none"} in {page}')
            bad += 1
        if helped[name][1] != rows[name][1]:
            print(f'--{name}: default "{helped[name][1]}" in --help, '
                  f'"{rows[name][1]}" in {page}')
            bad += 1
    print(f'{len(helped)} options in --help, {len(documented)} rows\' '
          f'options in {page} (name, variable, default), {bad} differences')
    return 1 if bad or not helped else 0


def libraries(page: str, deps_script: str, binaries: list) -> int:
    rows = []
    for _, line in prose_lines(page):
        cells = [c.strip() for c in line.split('|')[1:-1]]
        if len(cells) == 5 and cells[2].startswith('`'):
            rows.append(cells)
    sonames = {c[4].strip('`') for c in rows if c[4]}
    needed, glibc = set(), (0, 0)
    for b in binaries:
        out = subprocess.run(['readelf', '-d', b], capture_output=True,
                             text=True, check=True).stdout
        needed |= set(re.findall(r'Shared library: \[([^\]]+)\]', out))
        out = subprocess.run(['objdump', '-T', b], capture_output=True,
                             text=True, check=True).stdout
        for v in re.findall(r'GLIBC_(\d+)\.(\d+)', out):
            glibc = max(glibc, (int(v[0]), int(v[1])))
    # The dynamic loader, and the sanitizers' runtimes of an ASan build.
    needed = {n for n in needed if not re.match(
        r'(ld-linux|lib[atlu]+san\.so|libubsan\.so)', n)}
    bad = 0
    for n in sorted(needed - sonames):
        print(f'{n}: needed by the binaries, not in {page}\'s table')
        bad += 1
    for n in sorted(sonames - needed):
        print(f'{n}: in {page}\'s table, needed by none of the binaries')
        bad += 1
    stated = [re.match(r'glibc (\d+)\.(\d+) or later', c[0]) for c in rows]
    stated = [(int(m.group(1)), int(m.group(2))) for m in stated if m]
    if stated != [glibc]:
        print(f'the binaries need glibc {glibc[0]}.{glibc[1]}; '
              f'{page} states {stated}')
        bad += 1
    deps = open(deps_script, encoding='utf-8').read()
    listed = set(re.findall(r'^  ([a-z0-9][a-z0-9.+-]*) ', deps, re.M))
    for c in rows:
        dev = c[2].split(',')[0].strip().strip('`')
        if dev not in listed:
            print(f'{dev}: in {page}\'s table, not in {deps_script}')
            bad += 1
    print(f'{len(rows)} libraries in {page}, {len(needed)} needed by '
          f'{len(binaries)} binaries, glibc {glibc[0]}.{glibc[1]}, '
          f'{bad} differences')
    return 1 if bad or not rows else 0


def commands(help_file: str, page: str) -> int:
    text = open(page, encoding='utf-8').read()
    names = []
    for line in open(help_file, encoding='utf-8'):
        m = re.match(r'^  ([a-z][a-z-]*)[ ,]', line)
        if m:
            names.append(m.group(1))
    bad = [n for n in names if not re.search(r'`(?:rdzvctl )?' + re.escape(n) + r'[` ]',
                                             text)]
    for n in bad:
        print(f'rdzvctl {n}: in rdzvctl help, not in {page}')
    print(f'{len(names)} commands in rdzvctl help, {len(bad)} undocumented')
    return 1 if bad or not names else 0


def statuses(header: str, page: str) -> int:
    declared = set(re.findall(r'X\((E[A-Z0-9_]+),', open(header).read()))
    text = open(page, encoding='utf-8').read()
    rows = set(re.findall(r'^\| `RDZV_(E[A-Z0-9_]+)` \|', text, re.M))
    named = set(re.findall(r'RDZV_(E[A-Z0-9_]+)', text))
    bad = 0
    for n in sorted(declared - rows):
        print(f'RDZV_{n}: in {header}, no row in {page}')
        bad += 1
    for n in sorted(named - declared):
        print(f'RDZV_{n}: in {page}, not a status of {header}')
        bad += 1
    print(f'{len(declared)} statuses, {len(rows)} rows, {bad} differences')
    return 1 if bad or not declared else 0


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'statuses':
        sys.exit(statuses(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == 'options':
        sys.exit(options(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 5 and sys.argv[1] == 'libraries':
        sys.exit(libraries(sys.argv[2], sys.argv[3], sys.argv[4:]))
    if len(sys.argv) == 4 and sys.argv[1] == 'commands':
        sys.exit(commands(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 3 and sys.argv[1] == 'links':
        sys.exit(links(sys.argv[2], sys.argv[3:]))
    if len(sys.argv) == 4 and sys.argv[1] == 'blocks':
        sys.exit(blocks(sys.argv[2], sys.argv[3]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
