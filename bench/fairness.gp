# Fairness across processes: each process's share of the grants (top) and
# its longest wait (bottom), per primitive, P processes x W loops on one
# name, one primitive after the other.
# Called by scripts/bench.sh as:
#   gnuplot -e "outfile='OUT/fairness.png'; datafile='OUT/fairness.dat'; procs=3; run='...'" bench/fairness.gp
# fairness.dat: one line per primitive, "prim share_1 .. share_P
# max_wait_ms_1 .. max_wait_ms_P grants_per_s" (prim: mutex, mutex_racing,
# write, semaphore, fair).
set terminal pngcairo size 960,820 font ",11" noenhanced
set output outfile
if (!exists("run")) run = "same machine, same redis-server, same run"
label(p) = p eq "mutex" ? "mutex\n(bounded waiting)" : \
           p eq "mutex_racing" ? "mutex, always racing\n(starve_ms never)" : \
           p eq "write" ? "write lock" : \
           p eq "semaphore" ? "semaphore\n(1 of 2 permits)" : \
           p eq "fair" ? "fair lock" : p
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right box opaque horizontal
set xtics nomirror scale 0
set lmargin 10
set bmargin 4
set linetype 1 linecolor rgb "#1f77b4"
set linetype 2 linecolor rgb "#ff7f0e"
set linetype 3 linecolor rgb "#2ca02c"
set linetype 4 linecolor rgb "#d62728"
set linetype 5 linecolor rgb "#9467bd"
set linetype 6 linecolor rgb "#8c564b"
set linetype 7 linecolor rgb "#e377c2"
set linetype 8 linecolor rgb "#7f7f7f"
fair = 1.0 / procs
set multiplot layout 2,1 title "Fairness across " . procs . " processes on one name (" . run . ")"
set title "Share of the grants per process (dashed: 1/P; dotted: +-25 %)"
set ylabel "share of the grants"
set yrange [0:1.05]
set ytics 0.1
set arrow 1 from graph 0, first fair to graph 1, first fair nohead dashtype 2 linewidth 1.5 linecolor rgb "black" front
set arrow 2 from graph 0, first 1.25*fair to graph 1, first 1.25*fair nohead dashtype 3 linecolor rgb "gray30" front
set arrow 3 from graph 0, first 0.75*fair to graph 1, first 0.75*fair nohead dashtype 3 linecolor rgb "gray30" front
plot for [i=2:procs+1] datafile using i:xtic(label(strcol(1))) linetype (i-1) title sprintf("process %d", i-1)
unset arrow 1
unset arrow 2
unset arrow 3
unset key
set title "Longest wait of each process, acquire call to callback (a wait still pending at the end counts)"
set ylabel "ms (log scale)"
set logscale y
set yrange [1:*]
set ytics auto
set format y "%g"
plot for [i=procs+2:2*procs+1] datafile using i:xtic(label(strcol(1))) linetype (i-procs-1) notitle
unset multiplot
