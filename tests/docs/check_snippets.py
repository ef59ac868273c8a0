#!/usr/bin/env python3
"""Compiles every C++ snippet of README.md and the pages under docs/ against the built libferry.so.

Each ```cpp block must be marked by an HTML comment just above it (invisible on a rendered page):

  <!-- snippet: program -->       a whole program: compiled, linked and run (it must exit 0)
  <!-- snippet: fragment        statements: compiled and linked as the body of a function, after
  int W = 2;                     the declarations the comment holds (what the prose assumes)
  -->
  <!-- snippet: toplevel ... --> declarations at namespace scope (after the comment's lines)
  <!-- snippet: none REASON -->  not compiled; the reason is required

An unmarked block fails the test, so a new snippet cannot be skipped silently. The fragments and
declarations of all files go into one translation unit (one compile of <ferry/ferry.h> instead of
one per snippet), each in a namespace of its own, with #line directives so that an error names the
markdown file and line. Programs are compiled one each and run with a 60 s limit.

Usage: check_snippets.py [--syntax-only] SOURCE_DIR LIBDIR WORKDIR CXX [CXX ARGS...]
--syntax-only checks the snippets without a built library (nothing linked or run): for editing
the documentation.
"""
import glob
import os
import re
import subprocess
import sys
import time

HEADER = """#include <ferry/ferry.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>
"""


def blocks(path, rel):
    """Yields (kind, context, code, line of the code's first line) for each cpp block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    fence = False
    while i < len(lines):
        line = lines[i]
        if line.startswith('```'):
            if not fence and line.strip() == '```cpp':
                start = i + 1
                end = start
                while not lines[end].startswith('```'):
                    end += 1
                kind, context = marker(lines, i, rel)
                yield kind, context, '\n'.join(lines[start:end]), start + 1
                i = end + 1
                continue
            fence = not fence
        i += 1


def marker(lines, fence_at, rel):
    j = fence_at - 1
    while j >= 0 and lines[j].strip() == '':
        j -= 1
    if j < 0 or not lines[j].rstrip().endswith('-->'):
        return 'unmarked', None
    end = j
    while j >= 0 and '<!--' not in lines[j]:
        j -= 1
    m = re.match(r'\s*<!--\s*snippet:\s*(\w+)(.*)$', lines[j])
    if not m:
        return 'unmarked', None
    kind = m.group(1)
    first = m.group(2)
    body = [first] + lines[j + 1:end + 1]
    body[-1] = body[-1].rstrip()[:-3]
    if kind == 'none':
        return kind, ' '.join(b.strip() for b in body).strip()
    text = '\n'.join(body).strip('\n')
    return kind, (j + 1, text)   # the context's text starts on the marker's line


def main():
    args = sys.argv[1:]
    syntax_only = args[0] == '--syntax-only'
    if syntax_only:
        args = args[1:]
    source, libdir, work = args[:3]
    cxx = args[3:]
    os.makedirs(work, exist_ok=True)
    eigen = subprocess.run(['pkg-config', '--cflags', 'eigen3'], capture_output=True, text=True,
                           check=True).stdout.split()
    flags = ['-std=c++20', '-O0', '-I' + os.path.join(source, 'include'), *eigen,
             '-DMPICH_SKIP_MPICXX']
    link = ['-L' + libdir, '-lferry', '-Wl,-rpath,' + libdir, '-pthread']
    files = ['README.md'] + sorted(os.path.relpath(p, source)
                                   for p in glob.glob(os.path.join(source, 'docs', '**', '*.md'),
                                                      recursive=True))
    unit = [HEADER]
    programs, problems, counts = [], [], {}
    n = 0
    for rel in files:
        for kind, context, code, line in blocks(os.path.join(source, rel), rel):
            counts[kind] = counts.get(kind, 0) + 1
            where = '%s:%d' % (rel, line)
            if kind == 'unmarked':
                problems.append('%s: a ```cpp block without a <!-- snippet: ... --> marker' % where)
            elif kind == 'none':
                if not context:
                    problems.append('%s: "snippet: none" needs a reason' % where)
            elif kind == 'program':
                programs.append((where, '#line %d "%s"\n%s\n' % (line, rel, code)))
            elif kind in ('fragment', 'toplevel'):
                n += 1
                ctx_line, ctx = context
                unit.append('namespace snippet_%d {  // %s' % (n, where))
                if kind == 'toplevel':
                    unit.append('#line %d "%s"\n%s' % (ctx_line, rel, ctx))
                    unit.append('#line %d "%s"\n%s' % (line, rel, code))
                else:
                    unit.append('[[maybe_unused]] void snippet() {')
                    unit.append('#line %d "%s"\n%s' % (ctx_line, rel, ctx))
                    unit.append('#line %d "%s"\n%s' % (line, rel, code))
                    unit.append('}')
                unit.append('}  // namespace snippet_%d' % n)
            else:
                problems.append('%s: unknown snippet kind "%s"' % (where, kind))
    print('snippets:', ', '.join('%d %s' % (v, k) for k, v in sorted(counts.items())))
    for p in problems:
        print('FAIL:', p)
    jobs = []
    path = os.path.join(work, 'fragments.cpp')
    open(path, 'w').write('\n'.join(unit) + '\nint main() { return 0; }\n')
    jobs.append(('fragments (%d)' % n, path, None))
    for i, (where, text) in enumerate([] if syntax_only else programs):
        p = os.path.join(work, 'program_%d.cpp' % i)
        open(p, 'w').write(text)
        jobs.append(('program ' + where, p, where))
    # Two compilers at once: the machine has two cores.
    t0 = time.time()
    running = []
    results = []
    for name, src, where in jobs:
        exe = src[:-4]
        command = cxx + flags + ([src, '-fsyntax-only'] if syntax_only else [src, '-o', exe] + link)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        running.append((name, proc, exe, where))
        if len(running) == 2:
            results.append(running.pop(0))
            results[-1][1].wait()
    results += running
    failed = bool(problems)
    for name, proc, exe, where in results:
        out = proc.communicate()[0]
        if proc.returncode != 0:
            failed = True
            print('FAIL: %s does not compile:\n%s' % (name, out))
            continue
        print('compiled: %s' % name)
        if where is None:
            continue
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('FERRY_', 'PMI_', 'PMIX_', 'OMPI_', 'RANK', 'WORLD_SIZE',
                                    'SLURM_', 'MASTER_'))}
        run = subprocess.run([exe], capture_output=True, text=True, timeout=60, env=env)
        print('  ran %s: exit %d; %s' % (where, run.returncode,
                                         run.stdout.strip().replace('\n', ' | ')[:300]))
        if run.returncode != 0:
            failed = True
            print('FAIL: %s exited %d:\n%s%s' % (where, run.returncode, run.stdout, run.stderr))
    print('took %.1f s' % (time.time() - t0))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
