#!/bin/sh
# Install (or remove) traindeck's menu entry, icon and AppStream metainfo for the current user, under
# ${XDG_DATA_HOME:-~/.local/share}: applications/, icons/hicolor/, metainfo/. No root needed.
#
#   packaging/install_desktop.sh                      # Exec=traindeck (the command must be on PATH)
#   packaging/install_desktop.sh --exec PATH          # e.g. dist/traindeck/traindeck or .venv/bin/traindeck
#   packaging/install_desktop.sh --uninstall
set -eu

here=$(cd "$(dirname "$0")" && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
case $data in /*) ;; *) data=$HOME/.local/share ;; esac  # the XDG spec: relative values are ignored
exec_path=""
uninstall=0
while [ $# -gt 0 ]; do
    case $1 in
        --exec) [ $# -ge 2 ] || { echo "--exec needs a path" >&2; exit 2; }; exec_path=$2; shift 2 ;;
        --exec=*) exec_path=${1#--exec=}; shift ;;
        --uninstall) uninstall=1; shift ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
done

apps=$data/applications
icons=$data/icons/hicolor
meta=$data/metainfo
sizes="48 128 256"

refresh() {
    # Both are optional: desktops also rescan on their own, just later.
    if command -v update-desktop-database >/dev/null 2>&1; then update-desktop-database -q "$apps" || true; fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$icons/index.theme" ]; then
        gtk-update-icon-cache -q -t -f "$icons" || true
    fi
}

if [ "$uninstall" = 1 ]; then
    rm -f "$apps/traindeck.desktop" "$meta/io.github.traindeck.metainfo.xml" "$icons/scalable/apps/traindeck.svg"
    for s in $sizes; do rm -f "$icons/${s}x${s}/apps/traindeck.png"; done
    refresh
    echo "removed traindeck's menu entry, icons and metainfo from $data"
    exit 0
fi

if [ -n "$exec_path" ]; then
    case $exec_path in /*) ;; *) exec_path=$(pwd)/$exec_path ;; esac  # the menu starts it from $HOME
    [ -x "$exec_path" ] || { echo "not an executable file: $exec_path" >&2; exit 1; }
    case $exec_path in *[!A-Za-z0-9_./+-]*)
        echo "the path has characters a .desktop Exec line would need quoted: $exec_path" >&2; exit 1 ;;
    esac
elif ! command -v traindeck >/dev/null 2>&1; then
    echo "note: 'traindeck' is not on PATH; the menu entry will not start until it is (or use --exec PATH)" >&2
fi

mkdir -p "$apps" "$meta" "$icons/scalable/apps"
for s in $sizes; do
    mkdir -p "$icons/${s}x${s}/apps"
    cp "$here/icons/traindeck-$s.png" "$icons/${s}x${s}/apps/traindeck.png"
done
cp "$here/icons/traindeck.svg" "$icons/scalable/apps/traindeck.svg"
cp "$here/io.github.traindeck.metainfo.xml" "$meta/"
if [ -n "$exec_path" ]; then
    sed -e "s|^Exec=.*|Exec=$exec_path|" -e "s|^TryExec=.*|TryExec=$exec_path|" \
        "$here/traindeck.desktop" > "$apps/traindeck.desktop"
else
    cp "$here/traindeck.desktop" "$apps/traindeck.desktop"
fi
chmod 644 "$apps/traindeck.desktop"
refresh
echo "installed $apps/traindeck.desktop (Exec=$(sed -n 's/^Exec=//p' "$apps/traindeck.desktop"))"
echo "installed icons under $icons and $meta/io.github.traindeck.metainfo.xml"
