# The herd: commands each lock client sends per handoff, against the
# number of waiters (P processes x W waiters each, all on one name).
# Called by scripts/bench.sh as:
#   gnuplot -e "outfile='OUT/herd.png'; files='herd-hilock-p2.dat ...';
#               titles='\"hilock, P=2\" ...'; lts='1 ...'; dts='1 ...'; run='...'" bench/herd.gp
# Each .dat file: "processes waiters_per_process total_waiters
# commands_per_handoff redis_calls_per_handoff" lines, by total waiters;
# one file per client and P. lts: each file's line type (its client's
# colour, as in plot.gp); dts: its dash type (1: P = 2, 2: P = 4).
set terminal pngcairo size 960,600 font ",11" noenhanced
set output outfile
if (!exists("run")) run = "same machine, same redis-server"
set title "The herd: commands per handoff, P processes x W waiters on one name, each holds 1 ms\n(" . run . ")"
set xlabel "waiters, P x W (log scale)"
set ylabel "commands the clients sent per handoff (INFO commandstats; log scale)"
set logscale xy
set format x "%g"
set format y "%g"
set xrange [20:4000]
set yrange [1:300]
set grid xtics ytics mytics
set key top right Left reverse box opaque samplen 3
set linetype 1 linecolor rgb "#1f77b4"
set linetype 2 linecolor rgb "#2ca02c"
set linetype 3 linecolor rgb "#7f7f7f"
set linetype 4 linecolor rgb "#ff7f0e"
set linetype 5 linecolor rgb "#d62728"
set linetype 6 linecolor rgb "#8c564b"
if (!exists("lts")) lts = "1 2 3 4 5 6 7 8 9 10 11 12"
if (!exists("dts")) dts = "1 1 1 1 1 1 1 1 1 1 1 1"
plot for [i=1:words(files)] word(files, i) using 3:4 with linespoints linewidth 2 pointsize 1.2 \
     linetype int(word(lts, i)) dashtype int(word(dts, i)) pointtype (int(word(dts, i)) == 1 ? 7 : 5) \
     title word(titles, i)
