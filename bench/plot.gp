# Handoff latency distributions (CDF), one line per client.
# Called by scripts/bench.sh as:
#   gnuplot -e "outfile='OUT/handoff.png'; files='a.dat b.dat'; titles='a b'; ping=22.5" bench/plot.gp
# Each .dat file holds "latency_us cumulative_fraction" lines, sorted.
set terminal pngcairo size 960,600 font ",11" noenhanced
set output outfile
set title "Lock handoff latency: release call -> the other process's acquire callback\n(same machine, same redis-server, same run; log scale)"
set xlabel "handoff latency (microseconds)"
set ylabel "fraction of handoffs at or below"
set logscale x
set format x "%g"
set xrange [10:30000]
set yrange [0:1]
set ytics 0.1
set grid xtics ytics mxtics
set key bottom right box opaque
set linetype 4 linecolor rgb "#d62728"
set linetype 5 linecolor rgb "#8c564b"
# ping: the PING round trip p50 of the same run (us), drawn with 4x of it.
if (exists("ping")) {
    set arrow 1 from ping, graph 0 to ping, graph 1 nohead dashtype 2 linecolor rgb "gray40"
    set label 1 sprintf("ping RTT p50 %.0f us", ping) at ping, graph 0.55 rotate by 90 offset -1,0 textcolor rgb "gray40"
    set arrow 2 from 4*ping, graph 0 to 4*ping, graph 1 nohead dashtype 3 linecolor rgb "gray40"
    set label 2 "4 x ping" at 4*ping, graph 0.55 rotate by 90 offset -1,0 textcolor rgb "gray40"
}
plot for [i=1:words(files)] word(files, i) using 1:2 with steps linewidth 2 title word(titles, i)
