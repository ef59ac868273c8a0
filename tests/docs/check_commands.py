#!/usr/bin/env python3
"""Runs every command README.md shows a user, as written, the way check_snippets.py runs its C++.

A command is an inline code span (or a line of a ```sh block) of README.md that starts with one of
PREFIXES. Each one found must be in RUN (run from a folder where `tools/` is the source tree's and
`build/` is the build folder, as after `tools/demo`; it must exit 0) or in SKIP with the reason it
cannot run here; a command in neither fails the test, so a new one in the README cannot go
untested silently, and one in RUN that the README no longer shows fails too.

Usage: check_commands.py SOURCE_DIR BUILD_DIR [SUBSTRING]  (SUBSTRING: run only matching ones)
"""
import os
import re
import subprocess
import sys
import tempfile
import time

PREFIXES = ('tools/', 'build/tools/', 'mpiexec ', 'FERRY_BACKEND=', 'FERRY_SECRET=',
            'MASTER_PORT=', 'meson ', 'ninja ', './build/')

# The main job's section, its documented variants, the Troubleshooting table's tools and the
# comm-op bench of "What there is".
RUN = [
    'tools/demo',
    'tools/demo --world-size 2 --sharding mixed',
    'mpiexec -n 2 build/tools/ferry-dlrm',
    'FERRY_BACKEND=ucx build/tools/ferry-run -n 2 build/tools/ferry-dlrm',
    'tools/demo mlp',
    'tools/demo mlp --world-size 2 --epochs 4',
    'mpiexec -n 2 build/tools/ferry-train',
    'FERRY_BACKEND=ucx build/tools/ferry-run -n 2 build/tools/ferry-train',
    'build/tools/ferry-info',
    'mpiexec -n 2 build/tools/ferry-bench --transport mpi --op all_reduce --sizes 8,1M',
    './build/tools/ferry-bench --op torchrec --world-size 2 --sizes 512,1M',
]

SKIP = {
    'tools/test': 'runs this test (and every other suite)',
    'tools/test --sanitize': 'rebuilds everything under the sanitizers (tools/test --sanitize is CI\'s)',
    'tools/setup': 'run by tools/demo, which is run here',
    'tools/dlrm_trainer.cpp': 'a file, not a command',
    'tools/demo_trainer.cpp': 'a file, not a command',
    'tools/examples/': 'a folder, not a command',
    'mpiexec -n 4 ./my_trainer': 'the user\'s own program (the Launching table\'s placeholder)',
    'build/tools/ferry-run -n 4 ./my_trainer': 'the user\'s own program (placeholder)',
    'FERRY_BACKEND=ucx': 'a variable, not a command',
    'FERRY_BACKEND': 'a variable, not a command',
}
# Blocks and spans whose commands other tests run: the install recipe (install-recipe), the
# by-hand build (what tools/test does), the first program's and the consumers' (install-consumers).
OTHER_TESTS = ('meson ', 'ninja ', './build/tests/', 'FERRY_SECRET=', 'MASTER_PORT=')


def commands(readme):
    text = open(readme, encoding='utf-8').read()
    found = []
    # Inline spans, which may wrap onto the next line of the paragraph.
    for span in re.findall(r'(?<!`)`([^`]+)`(?!`)', re.sub(r'```.*?```', '', text, flags=re.S)):
        cmd = ' '.join(span.split())
        if cmd.startswith(PREFIXES):
            found.append(cmd)
    for block in re.findall(r'```sh\n(.*?)```', text, flags=re.S):
        for line in block.split('\n'):
            cmd = ' '.join(line.split('#')[0].split())
            if cmd.startswith(PREFIXES):
                found.append(cmd)
    return found


def main():
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    only = sys.argv[3] if len(sys.argv) > 3 else None
    found = commands(os.path.join(source, 'README.md'))
    unknown = sorted({c for c in found
                      if c not in RUN and c not in SKIP and not c.startswith(OTHER_TESTS)})
    stale = [c for c in RUN if c not in found]
    failed = []
    if unknown:
        failed.append('commands the README shows that this test neither runs nor skips: ' +
                      '; '.join(unknown))
    if stale:
        failed.append('commands this test runs that the README no longer shows: ' +
                      '; '.join(stale))
    with tempfile.TemporaryDirectory() as work:
        # The layout a reader has after tools/demo: tools/ and build/ side by side.
        os.symlink(os.path.join(source, 'tools'), os.path.join(work, 'tools'))
        os.symlink(build, os.path.join(work, 'build'))
        env = dict(os.environ, BUILD_DIR=build)
        for cmd in RUN:
            if only and only not in cmd:
                continue
            start = time.monotonic()
            p = subprocess.run(['bash', '-c', cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=900)
            took = time.monotonic() - start
            print(f'== {cmd}: exit {p.returncode} ({took:.1f} s)')
            if p.returncode != 0:
                print(p.stdout[-4000:])
                failed.append(f'{cmd}: exit {p.returncode}')
            else:
                print('   ' + '\n   '.join(p.stdout.strip().split('\n')[-2:]))
    if failed:
        print('FAIL:\n  ' + '\n  '.join(failed))
        return 1
    print(f'{len(RUN)} commands of the README ran and exited 0')
    return 0


if __name__ == '__main__':
    sys.exit(main())
