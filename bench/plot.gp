# Handoff latency distributions (CDF), one line per client.
# Called by scripts/bench.sh as:
#   gnuplot -e "outfile='OUT/handoff.png'; files='a.dat b.dat'; titles='a \"b c\"';
#               lts='1 4'; ping=22.5; run='...'" bench/plot.gp
# Each .dat file holds "latency_us cumulative_fraction" lines, sorted
# (hilock-bench -o DIR, bench/peers/peers.js --lat-dir DIR). titles: one
# word (or "quoted words") per file; lts: the line type of each (the same
# client has the same colour in every plot); ping (optional): the PING
# round trip p50 of the same run, in us; run (optional): the subtitle.
set terminal pngcairo size 960,600 font ",11" noenhanced
set output outfile
if (!exists("run")) run = "same machine, same redis-server, same run"
set title "Lock handoff latency: release call -> the other process's acquire callback\n(" . run . "; log scale)"
set xlabel "handoff latency (microseconds)"
set ylabel "fraction of handoffs at or below"
set logscale x
set format x "%g"
set xrange [10:30000]
set yrange [0:1]
set ytics 0.1
set grid xtics ytics mxtics
set key top left Left reverse box opaque samplen 3
# 1 hilock, 2 the fair lock, 3 the floor, 4 polling, 5 redis-semaphore, 6 redlock
set linetype 1 linecolor rgb "#1f77b4"
set linetype 2 linecolor rgb "#2ca02c"
set linetype 3 linecolor rgb "#7f7f7f"
set linetype 4 linecolor rgb "#ff7f0e"
set linetype 5 linecolor rgb "#d62728"
set linetype 6 linecolor rgb "#8c564b"
if (!exists("lts")) lts = "1 2 3 4 5 6 7 8"
# ping: the PING round trip p50 of the same run (us), drawn with 4x of it.
if (exists("ping")) {
    set arrow 1 from ping, graph 0 to ping, graph 1 nohead dashtype 2 linecolor rgb "gray40"
    set label 1 sprintf("ping RTT p50 %.0f us", ping) at ping, graph 0.3 rotate by 90 offset -1,0 textcolor rgb "gray40"
    set arrow 2 from 4*ping, graph 0 to 4*ping, graph 1 nohead dashtype 3 linecolor rgb "gray40"
    set label 2 "4 x ping" at 4*ping, graph 0.3 rotate by 90 offset -1,0 textcolor rgb "gray40"
}
plot for [i=1:words(files)] word(files, i) using 1:2 with steps linewidth 2 \
     linetype int(word(lts, i)) title word(titles, i)
