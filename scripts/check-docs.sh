#!/usr/bin/env bash
# The repository speaks of the product, not of the history of its making. Fails, printing
# each file:line, where a tracked file (code, comments, docs, data, scripts, or a file's
# name) counts sessions of work by ordinal, cites an issue by its number, or cites a
# document that is not in the repository (the patterns below).
# Upstream's code (patches/zeromq) is left as it is; the patch's own README is checked. Allowed exceptions, each a file and
# the words allowed there: scripts/check-docs.allow. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

ORD='fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth'

# Each check: a name, what is refused (extended regex, any case), and what is stripped
# from a hit's line before that regex is applied again (its allowed forms; "" for none).
NAMES=(); REFUSED=(); STRIPPED=()
add() { NAMES+=("$1"); REFUSED+=("$2"); STRIPPED+=("$3"); }
# An ordinal from the list above, alone; a fraction ("a" or a count before it, plural
# or hyphenated) is not one.
add "ordinal" "\\b($ORD)\\b" "\\b(a|an|one|two|three|every|each)[ -]($ORD)s?\\b"
# The word issue or issues, then a number (with a space, "#" or "-" between).
add "issue number" "\\bissues?[ #-]*[0-9]+" ""
# A session of work ("this session's build"); Salt's session keys are not one.
add "session of work" "\\b(this|that|last|previous|earlier|later|next|another|other)[ -]sessions?('s|s')?\\b|\\bsessions? of work\\b" ""
# Documents that are not in the repository.
add "outside document" "design\\.md|key-storage\\.md|minion-protocol\\.md|cluster-protocol\\.md|\\bspec/|\\bspec §" ""
# "§N" names a section of docs/formats.md, on a line that names that file.
add "section sign not of docs/formats.md" "§" ".*formats\\.md.*"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -d '' FILES < <(git ls-files -z -- . ':!:patches/zeromq' ':!:scripts/check-docs.sh' ':!:scripts/check-docs.allow'
    git ls-files -z -- patches/zeromq/README-halite.md)
else
  mapfile -d '' FILES < <(find . -type f -not -path './.git/*' -not -path './patches/zeromq/*' \
    -not -path './target/*' -not -name check-docs.sh -not -name check-docs.allow -printf '%P\0'
    printf '%s\0' patches/zeromq/README-halite.md)
fi

# allowed FILE TEXT: the allow-list names this file and words on this line.
allowed() {
  local path re
  while IFS=$'\t' read -r path re; do
    [[ -z $path || $path == \#* ]] && continue
    [[ $1 == "$path" ]] && grep -qiE -- "$re" <<<"$2" && return 0
  done < scripts/check-docs.allow
  return 1
}

bad=0
for i in "${!NAMES[@]}"; do
  name=${NAMES[i]}
  re=${REFUSED[i]}
  strip=${STRIPPED[i]}
  # File names first, then contents.
  for f in "${FILES[@]}"; do
    if grep -qiE -- "$re" <<<"$f"; then
      echo "$f: file name: $name" >&2
      bad=1
    fi
  done
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    t=$text
    if [[ -n $strip ]]; then t=$(sed -E "s/$strip//gI" <<<"$t"); fi
    grep -qiE -- "$re" <<<"$t" || continue
    allowed "$file" "$text" && continue
    echo "$file:$line: $name: $text" >&2
    bad=1
  done < <(printf '%s\0' "${FILES[@]}" | xargs -0 grep -nIiE -- "$re" 2>/dev/null || true)
done

if [[ $bad != 0 ]]; then
  echo "check-docs: the lines above speak of the history of the work or cite files outside the repository;" >&2
  echo "say what is true of the product, or point at docs/ or at Salt's own documentation (scripts/check-docs.sh)." >&2
  exit 1
fi
echo "check-docs: ok"
