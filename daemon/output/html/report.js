/* SPDX-License-Identifier: MIT */
/*
 * The HTML report's script (embedded into the page by memprof, with the
 * profile's figures as JSON in <script id="mp-data">). It loads nothing:
 * every chart is drawn here, on a canvas (the timeline) or as SVG (the
 * flame graph). When it has run, <body> carries data-mp-ready="1",
 * data-mp-errors (script errors, also listed in #mp-errors) and
 * data-mp-render-ms (time from navigation start to the page drawn).
 */
(function () {
	'use strict';
	var errors = [];

	function noteError(text) {
		errors.push(text);
		var el = document.getElementById('mp-errors');
		if (el) el.textContent = errors.join('\n');
		document.body.setAttribute('data-mp-errors', String(errors.length));
	}
	window.onerror = function (msg, src, line, col) {
		noteError(String(msg) + ' (line ' + line + ':' + col + ')');
	};

	/* ---- small helpers ---- */

	function el(tag, attrs, text) {
		var e = document.createElement(tag);
		if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
		if (text !== undefined && text !== null) e.textContent = String(text);
		return e;
	}
	function add(parent, child) { parent.appendChild(child); return child; }
	function group(n) {
		if (n === null || n === undefined) return '-';
		var s = String(Math.round(n)), neg = s[0] === '-';
		if (neg) s = s.slice(1);
		s = s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
		return neg ? '-' + s : s;
	}
	function human(n) {
		if (n === null || n === undefined) return '';
		var a = Math.abs(n), u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
		while (a >= 1024 && i < u.length - 1) { a /= 1024; i++; }
		return (n < 0 ? '-' : '') + (i ? a.toFixed(1) : String(a)) + ' ' + u[i];
	}
	function ms(ns) { return (ns / 1e6).toFixed(3); }
	function timeLabel(ns) {
		var a = Math.abs(ns);
		if (a >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
		if (a >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
		if (a >= 1e3) return (ns / 1e3).toFixed(3) + ' µs';
		return ns.toFixed(0) + ' ns';
	}
	function pm(v, err) { return err !== undefined ? group(v) + ' ± ' + group(err) : group(v); }
	function hue(i) { return 'hsl(' + ((i * 137.508) % 360).toFixed(0) + ',55%,62%)'; }
	/* last index with a[i] <= x, or -1 */
	function lastLE(a, x) {
		var lo = 0, hi = a.length - 1, r = -1;
		while (lo <= hi) {
			var mid = (lo + hi) >> 1;
			if (a[mid] <= x) { r = mid; lo = mid + 1; } else hi = mid - 1;
		}
		return r;
	}

	var T0 = performance.now();
	document.body.setAttribute('data-mp-script-ms', T0.toFixed(1));
	var D = JSON.parse(document.getElementById('mp-data').textContent);
	var NAMES = D.names, INV = D.inv, N = INV.name.length;
	(function decode() { /* html.c writes times and parents as differences */
		var b = new Float64Array(N), e = new Float64Array(N), par = new Int32Array(N), t = 0;
		var tot = new Float64Array(N), pk = new Float64Array(N), live = 0;
		var mp = new Float64Array(N), mlive = 0;
		for (var i = 0; i < N; i++) {
			mlive += INV.maps[i];
			mp[i] = mlive;
			t += INV.begin[i];
			b[i] = t;
			e[i] = t + INV.dur[i];
			par[i] = INV.parent[i] ? i - INV.parent[i] : -1;
			live += INV.total[i];
			tot[i] = live;
			pk[i] = live + INV.peak[i];
		}
		INV.begin = b; INV.end = e; INV.parent = par; INV.total = tot; INV.peak = pk; INV.maps = mp;
	})();
	var app = el('div', { id: 'mp-app' });

	/* ---- header, flags, summary ---- */

	function header() {
		add(app, el('h1', null, 'memprof report'));
		var p = D.process;
		add(app, el('div', { class: 'sub' }, (p.exe || '?') + '  (pid ' + p.pid + ')' +
			(p.cmdline ? '  ' + p.cmdline : '')));
		add(app, el('div', { class: 'sub' }, 'window ' + timeLabel(D.windowNs) + ', mode ' +
			D.mode + (D.tracerPath !== 'unknown' ? ', path ' + D.tracerPath : '') + ', ' +
			group(N) + ' kernel invocations recorded'));
		var errBox = add(app, el('div', { id: 'mp-errors' }));
		errBox.textContent = errors.join('\n');
		var ul = add(app, el('ul', { class: 'flags', id: 'mp-flags' }));
		D.flags.forEach(function (f) { add(ul, el('li', { class: f[0] }, f[1])); });
		if (!D.flags.some(function (f) { return f[0] === 'warn'; }))
			add(ul, el('li', { class: 'ok' }, 'Nothing flagged: no drops, no corruption, no ' +
				'limit reached, no truncation.'));
	}

	function card(box, key, value, extra, id) {
		var c = add(box, el('div', { class: 'card' }));
		add(c, el('div', { class: 'k' }, key));
		add(c, el('div', id ? { class: 'v', id: id } : { class: 'v' }, value));
		if (extra) add(c, el('div', { class: 'e' }, extra));
	}

	/* A mapping figure: null in a file written before mappings were
	 * recorded, which is unknown, never 0. */
	function mapped(v) { return v === null || v === undefined ? 'unknown' : group(v); }
	var MAPS_UNKNOWN = 'this file was written before mappings were recorded';

	/* The heap, the anonymous mappings and RSS side by side: where RSS went. */
	function headline() {
		add(app, el('h2', null, 'Memory'));
		var box = add(app, el('div', { class: 'cards', id: 'mp-headline' }));
		card(box, 'heap peak (malloc family)', pm(D.peakBytes, D.peakBytesStderr) + ' B',
			human(D.peakBytes), 'mp-head-heap');
		card(box, 'mappings reserved peak (mmap)', D.mapsRecorded ? mapped(D.mapsPeak) + ' B' : 'unknown',
			D.mapsRecorded ? human(D.mapsPeak) + (D.mapsResidentPeak !== null ?
				'; resident at most ' + group(D.mapsResidentPeak) + ' B' : '') : MAPS_UNKNOWN,
			'mp-head-maps');
		card(box, 'RSS peak (sampled)', D.rssSamples ? group(D.rssPeak) + ' B' : 'unknown',
			D.rssSamples ? human(D.rssPeak) : 'no RSS sample', 'mp-head-rss');
	}

	function mappings() {
		add(app, el('h2', null, 'Anonymous mappings'));
		add(app, el('div', { class: 'muted' }, 'A separate view: the mmap, mremap and munmap calls the ' +
			'program made itself (reserved bytes), in no heap figure. Resident bytes are bounded by ' +
			'RssAnon at each RSS sample.'));
		var box = add(app, el('div', { class: 'cards' }));
		if (!D.mapsRecorded) {
			card(box, 'reserved peak', 'unknown', MAPS_UNKNOWN, 'mp-maps-peak');
			return;
		}
		card(box, 'reserved peak', group(D.mapsPeak) + ' B', human(D.mapsPeak), 'mp-maps-peak');
		card(box, 'reserved at the end', group(D.mapsLive) + ' B', human(D.mapsLive), 'mp-maps-live');
		card(box, 'mapped', group(D.mapsAlloc) + ' B', human(D.mapsAlloc) + ' in ' +
			group(D.mapsAllocCount) + ' mappings', 'mp-maps-alloc');
		card(box, 'unmapped', group(D.mapsFree) + ' B', human(D.mapsFree) + ' in ' +
			group(D.mapsFreeCount) + ' calls');
		card(box, 'resident peak at most', D.mapsResidentPeak === null ? 'unknown' :
			group(D.mapsResidentPeak) + ' B', D.mapsResidentPeak === null ? 'no RSS sample' :
			'min(reserved, RssAnon) at the samples', 'mp-maps-resident');
	}

	function summary() {
		headline();
		add(app, el('h2', null, 'Heap'));
		var box = add(app, el('div', { class: 'cards' }));
		card(box, 'peak live bytes (peakBytes)', pm(D.peakBytes, D.peakBytesStderr) + ' B',
			human(D.peakBytes) + ', ' + group(D.peakTensors) + ' blocks' +
			(D.peakBytesBiasBound !== undefined ? '; biased up by at most ' +
			group(D.peakBytesBiasBound) + ' B' : ''), 'mp-peak');
		card(box, 'live at the end (newBytes)', pm(D.newBytes, D.newBytesStderr) + ' B',
			human(D.newBytes) + ', ' + group(D.newTensors) + ' blocks');
		card(box, 'allocated', pm(D.allocBytes, D.allocBytesStderr) + ' B',
			human(D.allocBytes) + ' in ' + group(D.allocCount) + ' blocks');
		card(box, 'freed', pm(D.freeBytes, D.freeBytesStderr) + ' B',
			human(D.freeBytes) + ' in ' + group(D.freeCount) + ' blocks; ' +
			group(D.unknownFrees) + ' frees of blocks from before attach');
		if (D.rssSamples)
			card(box, 'RSS peak (sampled)', group(D.rssPeak) + ' B', human(D.rssPeak) +
				' over ' + group(D.rssSamples) + ' samples');
		mappings();
	}

	/* ---- the timeline: heap and RSS, phases and kernels under them ---- */

	var TL = {};

	/* Sorts the points by time, in place and stably: insertion, as the
	 * kernels' ends are nearly in order already (a kernel ends after those
	 * nested in it); false when that takes too long (many threads). */
	function sortNearly(T, V) {
		var n = T.length, moves = 0, budget = 16 * n + 1000;
		for (var i = 1; i < n; i++) {
			var t = T[i], v = V[i], j = i - 1;
			while (j >= 0 && T[j] > t) {
				T[j + 1] = T[j]; V[j + 1] = V[j]; j--;
				if (++moves > budget) return false;
			}
			T[j + 1] = t; V[j + 1] = v;
		}
		return true;
	}

	function seriesFrom(t, v) {
		var idx = [];
		for (var i = 0; i < t.length; i++) if (v[i] !== null && v[i] !== undefined) idx.push(i);
		idx.sort(function (a, b) { return t[a] - t[b] || a - b; });
		var T = new Float64Array(idx.length), V = new Float64Array(idx.length);
		for (var k = 0; k < idx.length; k++) { T[k] = t[idx[k]]; V[k] = v[idx[k]]; }
		return { t: T, v: V };
	}

	/* A figure where the model knows it: 0 at attach, every RSS sample's
	 * reading (@atRss, null where unknown), every kernel's end (@atEnd),
	 * @last at the end. */
	function knownSeries(atRss, atEnd, last) {
		var r = D.rss, n = 0, i, T = new Float64Array(r.t.length + N + 2), V = new Float64Array(T.length);
		T[n] = 0; V[n++] = 0;
		for (i = 0; i < r.t.length; i++) if (atRss[i] !== null) { T[n] = r.t[i]; V[n++] = atRss[i]; }
		for (i = 0; i < N; i++) { T[n] = INV.end[i]; V[n++] = atEnd[i]; }
		T[n] = D.windowNs; V[n++] = last;
		T = T.subarray(0, n); V = V.subarray(0, n);
		var T0 = T.slice(), V0 = V.slice();
		return sortNearly(T, V) ? { t: T, v: V } : seriesFrom(Array.from(T0), Array.from(V0));
	}

	/* The live heap: newBytes at the end. */
	function heapSeries() { return knownSeries(D.rss.heap, INV.total, D.newBytes); }

	/* The mappings' reserved bytes, as the heap; none when unknown. */
	function mapsSeries() {
		if (!D.mapsRecorded) return { t: new Float64Array(0), v: new Float64Array(0) };
		return knownSeries(D.rss.maps, INV.maps, D.mapsLive);
	}

	/* A lane per (thread, depth), threads in order of their first kernel;
	 * past 40 lanes the rest share the last one. */
	function lanes() {
		var key = new Map(), list = [], tidRank = new Map(), lane = new Int32Array(N), max = 40, i;
		var lastKey = -1, lastLane = -1;
		for (i = 0; i < N; i++) {
			var tid = INV.tid[i], d = Math.min(INV.depth[i], 15), k = tid * 16 + d;
			if (k === lastKey) { lane[i] = lastLane; continue; }
			if (!tidRank.has(tid)) tidRank.set(tid, tidRank.size);
			if (!key.has(k)) {
				key.set(k, list.length);
				list.push({ tid: tid, depth: d, rank: tidRank.get(tid), first: list.length });
			}
			lane[i] = lastLane = key.get(k);
			lastKey = k;
		}
		list.sort(function (a, b) { return a.rank - b.rank || a.depth - b.depth; });
		var remap = new Int32Array(list.length);
		list.forEach(function (l, n) { remap[l.first] = Math.min(n, max - 1); });
		var byLane = [];
		for (i = 0; i < Math.min(list.length, max); i++) byLane.push([]);
		for (i = 0; i < N; i++) {
			lane[i] = remap[lane[i]];
			byLane[lane[i]].push(i);
		}
		TL.laneInfo = list.slice(0, max);
		TL.lane = lane;
		TL.byLane = byLane.map(function (a) {
			var b = new Float64Array(a.length);
			for (var j = 0; j < a.length; j++) b[j] = INV.begin[a[j]];
			return { idx: Int32Array.from(a), begin: b };
		});
	}

	function timeline() {
		add(app, el('h2', null, 'Timeline'));
		var ctl = add(app, el('div', { class: 'controls' }));
		var reset = add(ctl, el('button', { id: 'mp-reset' }, 'Reset zoom'));
		add(ctl, el('span', { class: 'legend' })).innerHTML =
			'<span style="background:#2f6fd0"></span>heap live bytes' +
			'<span style="background:rgba(47,111,208,0.3);height:10px"></span>heap peak inside kernels' +
			'<span style="background:#d2691e"></span>RSS' +
			'<span style="background:#8e44ad"></span>mappings (reserved, on the RSS scale)' +
			' &nbsp; drag to pan, wheel to zoom, click a kernel for its tf.profile region';
		var box = add(app, el('div', { id: 'mp-timeline-box' }));
		var cv = add(box, el('canvas', { id: 'mp-timeline' }));
		var tip = add(box, el('div', { class: 'tip', id: 'mp-tip' }));
		tip.style.display = 'none';
		TL.cv = cv; TL.tip = tip;
		TL.heap = heapSeries();
		TL.rss = seriesFrom(D.rss.t, D.rss.rss);
		TL.maps = mapsSeries();
		lanes();
		var lo = 0, hi = D.windowNs;
		for (var i = 0; i < N; i++) { if (INV.begin[i] < lo) lo = INV.begin[i]; if (INV.end[i] > hi) hi = INV.end[i]; }
		if (hi <= lo) hi = lo + 1;
		TL.full = [lo, hi];
		TL.home = activity(lo, hi);
		TL.view = TL.home.slice();
		reset.onclick = function () { TL.view = TL.home.slice(); draw(); };
		wire(cv);
	}

	/* The first view: from the first kernel, phase or live byte (a program
	 * started by memprof run spends a while in its loader) to the end. */
	function activity(lo, hi) {
		var a = hi, h = TL.heap;
		if (N) a = Math.min(a, INV.begin[0]);
		D.phases.forEach(function (p) { a = Math.min(a, p.first); });
		for (var i = 0; i < h.t.length; i++) if (h.v[i] > 0) { a = Math.min(a, h.t[i]); break; }
		if (a >= hi) return [lo, hi];
		a = Math.max(lo, a - (hi - a) * 0.03);
		return [a, hi];
	}

	var CHART_H = 200, AXIS_H = 18, PHASE_H = 16, LANE_H = 14;

	function layout() {
		var w = PAGE_W;
		var h = CHART_H + AXIS_H + PHASE_H + TL.byLane.length * LANE_H + 6;
		var dpr = window.devicePixelRatio || 1;
		if (TL.w !== w || TL.h !== h) {
			TL.cv.width = Math.round(w * dpr); TL.cv.height = Math.round(h * dpr);
			TL.cv.style.height = h + 'px';
			TL.w = w; TL.h = h;
		}
		return dpr;
	}

	/* min/max per pixel column of a step series over the view: at most one
	 * vertical stroke per column whatever the number of points. */
	function buckets(s, W) {
		var v0 = TL.view[0], v1 = TL.view[1], span = v1 - v0;
		var mn = new Float64Array(W), mx = new Float64Array(W), has = new Uint8Array(W);
		var i = lastLE(s.t, v0), carry = i >= 0 ? s.v[i] : null, top = carry || 0;
		for (i = Math.max(i + 1, 0); i < s.t.length && s.t[i] <= v1; i++) {
			var c = Math.min(W - 1, Math.floor((s.t[i] - v0) / span * W)), v = s.v[i];
			if (!has[c]) { has[c] = 1; mn[c] = mx[c] = v; } else {
				if (v < mn[c]) mn[c] = v;
				if (v > mx[c]) mx[c] = v;
			}
			if (v > top) top = v;
		}
		return { mn: mn, mx: mx, has: has, carry: carry, top: top, last: i > 0 ? s.v[i - 1] : carry };
	}

	/* The heap's highest point inside each top-level kernel: the series
	 * only knows the live bytes at kernel ends and samples, so a kernel's
	 * peak_bytes is shown as a band over the time it ran (its per-column
	 * maximum, like the series). */
	function peakColumns(W) {
		var v0 = TL.view[0], span = TL.view[1] - v0, pk = new Float64Array(W), top = 0;
		for (var i = 0; i < N; i++) {
			if (INV.depth[i] !== 0 || INV.end[i] < v0 || INV.begin[i] > TL.view[1]) continue;
			var c0 = Math.max(0, Math.floor((INV.begin[i] - v0) / span * W));
			var c1 = Math.min(W - 1, Math.floor((INV.end[i] - v0) / span * W)), v = INV.peak[i];
			for (var c = c0; c <= c1; c++) if (v > pk[c]) pk[c] = v;
			if (v > top) top = v;
		}
		return { pk: pk, top: top };
	}

	function drawSeries(ctx, s, b, W, y, color) {
		var cols = 0, i = lastLE(s.t, TL.view[0]), cur = b.carry;
		ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.beginPath();
		var started = false;
		if (cur !== null) { ctx.moveTo(0, y(cur)); started = true; }
		var pos = Math.max(i + 1, 0);
		for (var c = 0; c < W; c++) {
			if (!b.has[c]) continue;
			cols++;
			/* the value before this column's points, then their range */
			if (started) ctx.lineTo(c, y(cur)); else { ctx.moveTo(c, y(b.mn[c])); started = true; }
			ctx.lineTo(c, y(b.mn[c])); ctx.lineTo(c, y(b.mx[c]));
			var c1 = TL.view[0] + (c + 1) / W * (TL.view[1] - TL.view[0]);
			while (pos < s.t.length && s.t[pos] < c1) pos++;
			cur = s.v[pos - 1];
			ctx.lineTo(c, y(cur));
		}
		/* the last value holds to the end of the profile */
		var xe = (D.windowNs - TL.view[0]) / (TL.view[1] - TL.view[0]) * W;
		if (started && cur !== null && xe > 0) ctx.lineTo(Math.min(W, xe), y(cur));
		ctx.stroke();
		TL.drawn = started;
		return cols;
	}

	function drawAxis(ctx, W, y0) {
		var v0 = TL.view[0], span = TL.view[1] - v0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
		if (span / step > 12) step *= 5; else if (span / step > 6) step *= 2;
		ctx.fillStyle = '#566'; ctx.font = '11px sans-serif'; ctx.strokeStyle = '#e6e8ec'; ctx.lineWidth = 1;
		for (var t = Math.ceil(v0 / step) * step; t <= TL.view[1]; t += step) {
			var x = Math.round((t - v0) / span * W) + 0.5;
			ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, y0); ctx.stroke();
			ctx.fillText(timeLabel(t), x + 2, y0 + 12);
		}
	}

	function drawPhases(ctx, W, y0) {
		var v0 = TL.view[0], span = TL.view[1] - v0, ph = D.phases;
		for (var i = 0; i < ph.length; i++) {
			var b = ph[i].first, e;
			if (ph[i].entries === 1) e = b + ph[i].durationNs;
			else e = i + 1 < ph.length ? ph[i + 1].first : D.windowNs;
			var x0 = Math.max(0, (b - v0) / span * W), x1 = Math.min(W, (e - v0) / span * W);
			if (x1 < 0 || x0 > W) continue;
			ctx.fillStyle = 'hsl(' + (200 + i * 40) % 360 + ',35%,85%)';
			ctx.fillRect(x0, y0, Math.max(1, x1 - x0), PHASE_H - 2);
			ctx.fillStyle = '#234';
			if (x1 - x0 > 30) ctx.fillText('phase ' + ph[i].name, x0 + 3, y0 + 11, x1 - x0 - 6);
		}
	}

	/* Slices wider than a pixel are drawn one by one with their names;
	 * narrower ones mark their pixel column of the lane, drawn once. */
	function drawSlices(ctx, W, y0) {
		var v0 = TL.view[0], span = TL.view[1] - v0, L = TL.byLane.length;
		var occ = new Uint8Array(L * W), drawn = 0;
		ctx.font = '10px sans-serif';
		for (var i = 0; i < N; i++) {
			var b = INV.begin[i], e = INV.end[i];
			if (e < v0 || b > TL.view[1]) continue;
			var l = TL.lane[i], x0 = (b - v0) / span * W, x1 = (e - v0) / span * W;
			if (x1 - x0 < 1) { occ[l * W + Math.max(0, Math.min(W - 1, Math.floor(x0)))] = 1; continue; }
			x0 = Math.max(0, x0); x1 = Math.min(W, x1);
			var y = y0 + l * LANE_H;
			ctx.fillStyle = i === TL.selected ? '#f2c200' : hue(INV.name[i]);
			ctx.fillRect(x0, y, x1 - x0, LANE_H - 2);
			drawn++;
			if (x1 - x0 > 24) {
				ctx.fillStyle = '#111';
				ctx.fillText(NAMES[INV.name[i]], x0 + 2, y + 10, x1 - x0 - 4);
			}
		}
		ctx.fillStyle = '#7a8aa6';
		for (l = 0; l < L; l++)
			for (var c = 0; c < W; c++)
				if (occ[l * W + c]) { ctx.fillRect(c, y0 + l * LANE_H, 1, LANE_H - 2); drawn++; }
		return drawn;
	}

	function draw() {
		var dpr = layout(), W = TL.w, ctx = TL.cv.getContext('2d');
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		ctx.clearRect(0, 0, TL.w, TL.h);
		var hb = buckets(TL.heap, W), rb = buckets(TL.rss, W), mb = buckets(TL.maps, W);
		/* the heap on its own scale (RSS is often many times the heap), the
		 * mappings on RSS's: reserved bytes next to resident ones */
		var pc = peakColumns(W), ht = Math.max(hb.top, pc.top, 1) * 1.08;
		var rt = Math.max(rb.top, mb.top, 1) * 1.08;
		var hy = function (v) { return 16 + (CHART_H - 16) * (1 - v / ht); };
		var ry = function (v) { return 16 + (CHART_H - 16) * (1 - v / rt); };
		drawAxis(ctx, W, CHART_H);
		ctx.font = '11px sans-serif';
		ctx.fillStyle = '#2f6fd0';
		ctx.fillText('heap, top ' + human(ht / 1.08), 4, 12);
		var rc = 0, mc = 0;
		if (TL.rss.t.length || TL.maps.t.length) {
			var label = (TL.maps.t.length ? 'RSS and mappings' : 'RSS') + ', top ' + human(rt / 1.08);
			ctx.fillStyle = '#d2691e';
			ctx.fillText(label, W - 6 - ctx.measureText(label).width, 12);
		}
		if (TL.maps.t.length) mc = drawSeries(ctx, TL.maps, mb, W, ry, '#8e44ad');
		if (TL.rss.t.length) rc = drawSeries(ctx, TL.rss, rb, W, ry, '#d2691e');
		TL.cv.setAttribute('data-rss-drawn', TL.rss.t.length && TL.drawn ? '1' : '0');
		TL.cv.setAttribute('data-maps-columns', String(mc));
		ctx.fillStyle = 'rgba(47,111,208,0.16)';
		for (var c = 0; c < W; c++) if (pc.pk[c] > 0) ctx.fillRect(c, hy(pc.pk[c]), 1, CHART_H - hy(pc.pk[c]));
		var hc = drawSeries(ctx, TL.heap, hb, W, hy, '#2f6fd0');
		drawPhases(ctx, W, CHART_H + AXIS_H);
		var sc = drawSlices(ctx, W, CHART_H + AXIS_H + PHASE_H);
		TL.cv.setAttribute('data-heap-columns', String(hc));
		TL.cv.setAttribute('data-rss-columns', String(rc));
		TL.cv.setAttribute('data-slices', String(sc));
		TL.cv.setAttribute('data-view', Math.round(TL.view[0]) + ',' + Math.round(TL.view[1]));
	}

	function valueAt(s, t) { var i = lastLE(s.t, t); return i >= 0 ? s.v[i] : null; }

	function invAt(x, yy) {
		var lane = Math.floor((yy - CHART_H - AXIS_H - PHASE_H) / LANE_H);
		if (lane < 0 || lane >= TL.byLane.length) return -1;
		var t = TL.view[0] + x / TL.w * (TL.view[1] - TL.view[0]);
		var L = TL.byLane[lane], k = lastLE(L.begin, t), slack = (TL.view[1] - TL.view[0]) / TL.w;
		for (var j = k; j >= 0 && j > k - 64; j--) {
			var i = L.idx[j];
			if (INV.end[i] + slack >= t) return i;
		}
		return -1;
	}

	function phaseAt(t) {
		var best = null;
		D.phases.forEach(function (p) { if (p.first <= t && (!best || p.first >= best.first)) best = p; });
		return best;
	}

	function hover(ev) {
		var r = TL.cv.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
		var t = TL.view[0] + x / TL.w * (TL.view[1] - TL.view[0]);
		var h = valueAt(TL.heap, t), s = valueAt(TL.rss, t), ph = phaseAt(t), mv = valueAt(TL.maps, t);
		var lines = ['t = ' + timeLabel(t) + ' from attach',
			'heap live ' + (h === null ? '-' : group(h) + ' B (' + human(h) + ')'),
			'RSS ' + (s === null ? '-' : group(s) + ' B (' + human(s) + ')'),
			'mappings reserved ' + (!D.mapsRecorded ? 'unknown' : mv === null ? '-' :
				group(mv) + ' B (' + human(mv) + ')')];
		if (ph) lines.push('phase ' + ph.name);
		var i = invAt(x, yy);
		if (i >= 0) {
			lines.push('', NAMES[INV.name[i]] + '  (thread ' + INV.tid[i] + ', depth ' + INV.depth[i] + ')',
				'duration ' + timeLabel(INV.end[i] - INV.begin[i]),
				'bytesAdded ' + group(INV.added[i]) + ', allocated ' + group(INV.alloc[i]),
				'peak live ' + group(INV.peak[i]) + ', peak added ' + group(INV.peakAdded[i]),
				'totalBytesSnapshot ' + group(INV.total[i]));
		}
		TL.tip.textContent = lines.join('\n');
		TL.tip.style.display = 'block';
		TL.tip.style.left = Math.min(x + 14, TL.w - 260) + 'px';
		TL.tip.style.top = (yy + 14) + 'px';
	}

	function zoomAt(x, factor) {
		var v0 = TL.view[0], span = TL.view[1] - v0, t = v0 + x / TL.w * span;
		var ns = Math.max(50, Math.min(TL.full[1] - TL.full[0], span * factor));
		var a = t - (t - v0) * ns / span;
		a = Math.max(TL.full[0], Math.min(a, TL.full[1] - ns));
		TL.view = [a, a + ns];
		draw();
	}

	function wire(cv) {
		var drag = null;
		cv.addEventListener('wheel', function (ev) {
			ev.preventDefault();
			var r = cv.getBoundingClientRect();
			zoomAt(ev.clientX - r.left, ev.deltaY > 0 ? 1.25 : 0.8);
		}, { passive: false });
		cv.addEventListener('mousedown', function (ev) {
			drag = { x: ev.clientX, view: TL.view.slice(), moved: false };
			cv.classList.add('drag');
		});
		window.addEventListener('mouseup', function (ev) {
			if (drag && !drag.moved) {
				var r = cv.getBoundingClientRect(), i = invAt(ev.clientX - r.left, ev.clientY - r.top);
				if (i >= 0) selectRegion(i);
			}
			drag = null;
			cv.classList.remove('drag');
		});
		cv.addEventListener('mousemove', function (ev) {
			if (drag) {
				var dx = ev.clientX - drag.x;
				if (Math.abs(dx) > 2) drag.moved = true;
				var span = drag.view[1] - drag.view[0], a = drag.view[0] - dx / TL.w * span;
				a = Math.max(TL.full[0], Math.min(a, TL.full[1] - span));
				TL.view = [a, a + span];
				draw();
			}
			hover(ev);
		});
		cv.addEventListener('mouseleave', function () { TL.tip.style.display = 'none'; });
		cv.addEventListener('dblclick', function () { TL.view = TL.home.slice(); draw(); });
		window.addEventListener('resize', function () { measure(); draw(); });
	}

	/* ---- tables ---- */

	/* Mapping columns of the kernel, phase, owner and tag tables ('m':
	 * "unknown" when the file has no mapping figures). */
	var MAPS_COLS = [['MAPPED_BYTES', 'mapsAlloc', 'm'], ['MAPS_PEAK', 'mapsPeak', 'm'],
		['MAPS_LIVE', 'mapsLive', 'm']];
	var MAPS_NOTE = 'MAPPED_BYTES: bytes of anonymous mappings made (nested kernels included); ' +
		'MAPS_PEAK and MAPS_LIVE: reserved mapping bytes, the highest and at the end; of a kernel ' +
		'or phase they are the process\'s (while it ran, at its last end), of an owner or tag its own.';

	/* cols: [title, key or function(row), kind ('n' numbers, 's' text)] */
	function table(parent, id, cols, rows, opts) {
		opts = opts || {};
		var wrap = add(parent, el('div', { class: 'scroll' }));
		var t = add(wrap, el('table', { id: id })), head = add(add(t, el('thead')), el('tr'));
		var body = add(t, el('tbody')), sort = opts.sort || null;
		function val(c, r) { return typeof c[1] === 'function' ? c[1](r) : r[c[1]]; }
		function cmp(a, b) {
			if (!sort) return 0;
			var c = cols[sort.col], x = val(c, a), y = val(c, b);
			if (c[3]) { x = c[3](a); y = c[3](b); }
			if (x === y) return 0;
			if (x === null || x === undefined) return 1;
			if (y === null || y === undefined) return -1;
			return (x < y ? -1 : 1) * sort.dir;
		}
		function render() {
			body.textContent = '';
			var list = opts.order ? opts.order(rows, cmp) : rows.slice().sort(cmp);
			list.forEach(function (item) {
				var r = item.row || item, tr = add(body, el('tr'));
				if (opts.onrow) opts.onrow(tr, r);
				cols.forEach(function (c, ci) {
					var v = val(c, r), td = add(tr, el('td', { class: c[2] === 's' ? 'name' : 'n' }));
					if (ci === 0 && item.depth !== undefined) {
						td.style.paddingLeft = (4 + item.depth * 16) + 'px';
						if (item.kids) {
							var tg = add(td, el('span', { class: 'tree' }, item.open ? '\u25BE' : '\u25B8'));
							tg.onclick = function (ev) { ev.stopPropagation(); item.toggle(); render(); };
						} else add(td, el('span', { class: 'tree' }));
					}
					td.appendChild(document.createTextNode(c[2] === 's' ? String(v) : c[2] === 'x' ? v :
						c[2] === 'm' ? mapped(v) : group(v)));
				});
			});
			Array.prototype.forEach.call(head.children, function (th, i) {
				th.className = sort && sort.col === i ? (sort.dir > 0 ? 'sorted-asc' : 'sorted-desc') : '';
			});
		}
		cols.forEach(function (c, i) {
			var th = add(head, el('th', null, c[0]));
			th.onclick = function () {
				sort = sort && sort.col === i ? { col: i, dir: -sort.dir } : { col: i, dir: c[2] === 's' ? 1 : -1 };
				render();
			};
		});
		render();
		return { render: render };
	}

	function kernelTable() {
		add(app, el('h2', null, 'Kernels'));
		var ctl = add(app, el('div', { class: 'controls' }));
		var lbl = add(ctl, el('label'));
		var nest = add(lbl, el('input', { type: 'checkbox', id: 'mp-nested', checked: 'checked' }));
		lbl.appendChild(document.createTextNode(' nested (a kernel under the kernel its first call ran in)'));
		add(ctl, el('span', null, ' Click a header to sort, a row for its first call\'s region.'));
		var ks = D.kernels, byId = {}, S = D.sampled;
		ks.forEach(function (k) { byId[k.id] = k; k.kids = []; k.parent = null; });
		/* the parent: the kernel of the parent of its first recorded call */
		var seen = {};
		for (var i = 0; i < N; i++) {
			var id = INV.name[i];
			if (seen[id]) continue;
			seen[id] = 1;
			var par = INV.parent[i];
			if (byId[id] && par >= 0 && par < N && byId[INV.name[par]]) byId[id].parent = byId[INV.name[par]];
		}
		ks.forEach(function (k) { /* no cycles: walk up a bounded number of steps */
			var p = k.parent, steps = 0;
			while (p && p !== k && steps++ < 300) p = p.parent;
			if (p === k || steps >= 300) k.parent = null;
		});
		ks.forEach(function (k) { if (k.parent) k.parent.kids.push(k); });
		var opened = {};
		function order(rows, cmp) {
			if (!nest.checked) return rows.slice().sort(cmp).map(function (r) { return { row: r }; });
			var out = [];
			function walk(list, depth) {
				list.slice().sort(cmp).forEach(function (k) {
					var item = { row: k, depth: depth, kids: k.kids.length > 0, open: opened[k.id] !== false };
					item.toggle = function () { opened[k.id] = !item.open; };
					out.push(item);
					if (item.kids && item.open) walk(k.kids, depth + 1);
				});
			}
			walk(rows.filter(function (k) { return !k.parent; }), 0);
			return out;
		}
		var cols = [['KERNEL', 'name', 's'], ['CALLS', 'calls'], ['BYTES_ADDED', 'bytesAdded'],
			['ALLOC_BYTES', 'allocBytes']];
		if (S) cols.push(['±ALLOC_BYTES', 'allocBytesStderr']);
		cols.push(['PEAK_ADDED', 'peakAdded']);
		if (S) cols.push(['±PEAK_ADDED', 'peakAddedStderr'], ['BIAS_ADDED<=', 'peakAddedBiasBound']);
		cols.push(['PEAK_LIVE', 'peakBytes']);
		if (S) cols.push(['±PEAK_LIVE', 'peakBytesStderr']);
		cols.push.apply(cols, MAPS_COLS);
		cols.push(['RSS_DELTA', 'rssDelta'], ['TIME_MS', function (k) { return ms(k.totalNs); }, 'x',
			function (k) { return k.totalNs; }]);
		var tb = table(app, 'mp-kernels', cols, ks, {
			order: order,
			onrow: function (tr, k) {
				tr.onclick = function () {
					for (var j = 0; j < N; j++) if (INV.name[j] === k.id) { selectRegion(j); return; }
				};
			}
		});
		nest.onchange = tb.render;
		add(app, el('div', { class: 'muted' }, MAPS_NOTE));
		if (S) add(app, el('div', { class: 'muted' }, 'Sampled peaks: PEAK_LIVE is biased up by at most ' +
			group(D.peakBytesBiasBound) + ' B (as the process peak); PEAK_ADDED by at most BIAS_ADDED.'));
	}

	/* ---- tf.profile's view of a region ---- */

	function within(i, r) {
		for (var steps = 0; i >= 0 && steps < 300; steps++) {
			if (i === r) return true;
			if (i < r) return false;
			i = INV.parent[i];
		}
		return false;
	}

	/* @cap: kernels listed at most; out.more counts the others. */
	function tfProfile(r, cap) {
		var out = { more: 0 }, kernels = [];
		if (r < 0) {
			out.newBytes = D.newBytes; out.newTensors = D.newTensors; out.peakBytes = D.peakBytes;
		} else {
			out.newBytes = INV.added[r]; out.newTensors = INV.tadded[r]; out.peakBytes = INV.peak[r];
		}
		for (var i = r < 0 ? 0 : r + 1; i < N; i++) {
			if (r >= 0 && INV.begin[i] > INV.end[r]) break;
			if (r >= 0 && !within(i, r)) continue;
			if (kernels.length >= cap) { out.more++; continue; }
			var sh = INV.shapes[i] || [[], []];
			kernels.push({ name: NAMES[INV.name[i]], bytesAdded: INV.added[i],
				totalBytesSnapshot: INV.total[i], tensorsAdded: INV.tadded[i],
				totalTensorsSnapshot: INV.ttotal[i], inputShapes: sh[0], outputShapes: sh[1] });
		}
		out.kernels = kernels;
		return out;
	}

	function findRegion(spec) {
		if (!spec) return -1;
		function nth(name, n) {
			for (var i = 0; i < N; i++) if (NAMES[INV.name[i]] === name && --n === 0) return i;
			return null;
		}
		var r = nth(spec, 1);
		if (r !== null) return r;
		var h = spec.lastIndexOf('#');
		if (h > 0 && /^[1-9][0-9]*$/.test(spec.slice(h + 1))) return nth(spec.slice(0, h), +spec.slice(h + 1));
		return null;
	}

	function regionLabel(r) {
		if (r < 0) return 'the whole profile';
		var n = 0;
		for (var i = 0; i <= r; i++) if (INV.name[i] === INV.name[r]) n++;
		return NAMES[INV.name[r]] + '#' + n;
	}

	var REG = {};
	function regionView() {
		add(app, el('h2', null, 'Region (tf.profile)'));
		var ctl = add(app, el('div', { class: 'controls' }));
		add(ctl, el('span', null, 'Region: '));
		var inp = add(ctl, el('input', { id: 'mp-region', placeholder: 'NAME or NAME#N (empty: whole profile)', size: 40 }));
		var go = add(ctl, el('button', null, 'Show'));
		REG.msg = add(ctl, el('span', { id: 'mp-region-name' }));
		REG.pre = add(app, el('pre', { id: 'mp-tfprofile' }));
		REG.inp = inp;
		function apply() {
			var r = findRegion(inp.value.trim());
			if (r === null) { REG.msg.textContent = ' no invocation "' + inp.value + '"'; return; }
			selectRegion(r);
		}
		go.onclick = apply;
		inp.onkeydown = function (ev) { if (ev.key === 'Enter') apply(); };
		showRegion(-1);
	}

	function showRegion(r) {
		var o = tfProfile(r, 2000), more = o.more;
		var text = '{"newBytes":' + o.newBytes + ',"newTensors":' + o.newTensors + ',"peakBytes":' +
			o.peakBytes + ',"kernels":[' + o.kernels.map(function (k) {
				return '\n  ' + JSON.stringify(k);
			}).join(',') + (o.kernels.length ? '\n' : '') + ']}';
		if (more > 0) text += '\n... and ' + group(more) + ' more kernels (memprof report --format tfjs has them all)';
		REG.pre.textContent = text;
		REG.msg.textContent = ' ' + regionLabel(r);
	}

	function selectRegion(r) {
		TL.selected = r;
		if (TL.cv) draw();
		if (REG.inp) REG.inp.value = r < 0 ? '' : regionLabel(r);
		showRegion(r);
	}

	/* ---- flame graphs of the allocation sites ---- */

	function flameTree(which) {
		/* kids without a prototype: a function may be named "constructor" */
		var root = { name: 'all', v: 0, kids: Object.create(null) };
		D.sites.forEach(function (s) {
			var v = s[which];
			if (!v) return;
			root.v += v;
			var n = root;
			for (var f = 0; f < s[3].length; f++) {
				var nm = s[3][f];
				n = n.kids[nm] || (n.kids[nm] = { name: nm, v: 0, kids: Object.create(null) });
				n.v += v;
			}
		});
		return root;
	}

	var FL = {};
	function flame() {
		add(app, el('h2', null, 'Allocation sites'));
		if (!D.sites.length) {
			add(app, el('div', { class: 'muted', id: 'mp-flame-none' }, 'No allocation sites in this profile.'));
			return;
		}
		var ctl = add(app, el('div', { class: 'controls' }));
		/* s[4]: bytes live at the peak (peakBytes), unknown in older files */
		var kinds = [['4', 'bytes live at the peak'], ['0', 'bytes allocated'],
			['1', 'bytes live at the end of the profile']];
		if (!D.sitesAtPeak) kinds = [kinds[2], kinds[1]];
		kinds.forEach(function (o, k) {
			var l = add(ctl, el('label'));
			var r = add(l, el('input', { type: 'radio', name: 'mp-flame-kind', value: o[0] }));
			if (!k) r.checked = true;
			r.onchange = function () { FL.which = +o[0]; FL.focus = null; drawFlame(); };
			l.appendChild(document.createTextNode(' ' + o[1]));
		});
		add(ctl, el('span', null, D.nStacks ? ' Click a frame to zoom into it, the root to zoom out.' :
			' This profile has no call stacks (taken without --stacks): each site is its caller alone.'));
		if (!D.sitesAtPeak)
			add(app, el('div', { class: 'muted', id: 'mp-flame-nopeak' }, 'This profile was written ' +
				'before sites recorded their bytes at the peak: the flame graph shows the bytes live ' +
				'at the end (or allocated) instead.'));
		var box = add(app, el('div', { id: 'mp-flame-box' }));
		FL.svg = add(box, document.createElementNS('http://www.w3.org/2000/svg', 'svg'));
		FL.svg.setAttribute('id', 'mp-flame');
		FL.which = +kinds[0][0];
		drawFlame();
	}

	function drawFlame() {
		var NS = 'http://www.w3.org/2000/svg', svg = FL.svg, W = PAGE_W;
		var root = flameTree(FL.which), H = 17, rows = [], maxDepth = 0;
		if (!root.v && FL.which !== 0) { /* nothing live then: show the allocations */
			FL.which = 0; root = flameTree(0);
			Array.prototype.forEach.call(document.getElementsByName('mp-flame-kind'), function (r) {
				r.checked = r.value === '0';
			});
		}
		var top = FL.focus || root;
		function walk(n, x, depth, scale) {
			if (depth > 128) return;
			rows.push({ n: n, x: x, w: n.v * scale, d: depth });
			if (depth > maxDepth) maxDepth = depth;
			var keys = Object.keys(n.kids).sort(), cx = x;
			keys.forEach(function (k) {
				var c = n.kids[k];
				if (c.v * scale >= 0.3) walk(c, cx, depth + 1, scale);
				cx += c.v * scale;
			});
		}
		if (FL.focus) {
			var path = FL.path || [];
			walk(top, 0, path.length, W / Math.max(1, top.v));
			path.forEach(function (n, d) { rows.push({ n: n, x: 0, w: W, d: d, up: true }); });
		} else walk(root, 0, 0, W / Math.max(1, root.v));
		svg.textContent = '';
		svg.setAttribute('width', W);
		svg.setAttribute('height', (maxDepth + 1) * H + 4);
		svg.setAttribute('data-frames', String(rows.length));
		svg.setAttribute('data-kind', String(FL.which));
		rows.forEach(function (r) {
			var g = document.createElementNS(NS, 'g'), rc = document.createElementNS(NS, 'rect');
			rc.setAttribute('x', r.x.toFixed(1)); rc.setAttribute('y', r.d * H);
			rc.setAttribute('width', Math.max(0.5, r.w).toFixed(1)); rc.setAttribute('height', H - 1);
			rc.setAttribute('fill', r.up ? '#ccd' : 'hsl(' + (20 + (hashStr(r.n.name) % 40)) + ',80%,' + (62 + hashStr(r.n.name) % 12) + '%)');
			var title = document.createElementNS(NS, 'title');
			title.textContent = r.n.name + '\n' + group(r.n.v) + ' B (' + human(r.n.v) + ', ' +
				(100 * r.n.v / Math.max(1, root.v)).toFixed(1) + '%)';
			g.appendChild(title); g.appendChild(rc);
			if (r.w > 40) {
				var tx = document.createElementNS(NS, 'text');
				tx.setAttribute('x', r.x + 3); tx.setAttribute('y', r.d * H + 12);
				var chars = Math.floor((r.w - 6) / 6.7), s = r.n.name;
				tx.textContent = s.length > chars ? s.slice(0, Math.max(0, chars - 1)) + '…' : s;
				g.appendChild(tx);
			}
			g.onclick = function () {
				if (r.up || r.n === top) {
					var p = FL.path || [], k = r.up ? p.indexOf(r.n) : p.length - 1;
					FL.focus = k > 0 ? p[k] : null; FL.path = k > 0 ? p.slice(0, k) : null;
				} else { FL.path = pathTo(root, r.n); FL.focus = r.n; }
				drawFlame();
			};
			svg.appendChild(g);
		});
	}

	function pathTo(root, target) {
		var out = null;
		(function dfs(n, acc) {
			if (out) return;
			if (n === target) { out = acc.slice(); return; }
			acc.push(n);
			for (var k in n.kids) dfs(n.kids[k], acc);
			acc.pop();
		})(root, []);
		return out || [];
	}

	function hashStr(s) {
		var h = 0;
		for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
		return Math.abs(h);
	}

	/* ---- phases, owners, tags, pools, execs ---- */

	/* Who held the peak: a bar per peak (the process's, each phase's), its
	 * parts stacked, by owner and, when the program tagged anything, by tag;
	 * the same parts in a table. */
	function peaks() {
		if (!D.peaks.length) return;
		add(app, el('h2', null, 'Who held the peak'));
		add(app, el('div', { class: 'muted' }, 'The bytes each owner (and tag) held when the heap ' +
			'first reached its peak: the whole run\'s and each phase\'s. The parts of a bar add up ' +
			'to its peak; a bar\'s length is its peak against the highest.'));
		var rows = [], byTag = D.tags.length > 1, top = 0;
		D.peaks.forEach(function (pk) { top = Math.max(top, pk.peakBytes); });
		[['owners', 'OWNER'], ['tags', 'TAG']].forEach(function (kind) {
			if (kind[0] === 'tags' && !byTag) return;
			var box = add(app, el('div', { class: 'peaks', id: 'mp-peaks-' + kind[0] }));
			add(box, el('div', { class: 'muted' }, kind[0] === 'owners' ? 'By owner' : 'By tag'));
			D.peaks.forEach(function (pk) {
				var row = add(box, el('div', { class: 'peak' }));
				add(row, el('div', { class: 'peak-name' }, pk.name + ': ' + group(pk.peakBytes) + ' B'));
				/* a bar as long as its peak against the highest one */
				var bar = add(add(row, el('div', { class: 'peak-track' })),
					el('div', { class: 'peak-bar', 'data-peak': pk.name }));
				bar.style.width = (top ? 100 * pk.peakBytes / top : 0).toFixed(4) + '%';
				pk[kind[0]].forEach(function (part) {
					var share = pk.peakBytes ? 100 * part[1] / pk.peakBytes : 0;
					var seg = add(bar, el('span', { class: 'seg', 'data-name': part[0], 'data-bytes': String(part[1]),
						title: part[0] + ': ' + group(part[1]) + ' B (' + share.toFixed(1) + '%)' }));
					seg.style.width = share.toFixed(4) + '%';
					seg.style.background = hue(hashStr(part[0]));
					if (share >= 8) seg.textContent = part[0];
					rows.push({ peak: pk.name, by: kind[1], name: part[0], bytes: part[1], share: share });
				});
			});
		});
		table(app, 'mp-peak-parts', [['PEAK', 'peak', 's'], ['BY', 'by', 's'], ['NAME', 'name', 's'],
			['BYTES', 'bytes'], ['SHARE', function (r) { return r.share.toFixed(1) + '%'; }, 'x',
				function (r) { return r.share; }]], rows);
	}

	function others() {
		var S = D.sampled;
		if (D.phases.length) {
			add(app, el('h2', null, 'Phases'));
			var c = [['PHASE', 'name', 's'], ['TIME_MS', function (p) { return ms(p.durationNs); }, 'x',
				function (p) { return p.durationNs; }], ['ENTRIES', 'entries'], ['NET_BYTES', 'bytesAdded'],
				['ALLOC_BYTES', 'allocBytes'], ['PEAK_BYTES', 'peakBytes']];
			if (S) c.push(['±PEAK_BYTES', 'peakBytesStderr']);
			c.push.apply(c, MAPS_COLS);
			c.push(['RSS_PEAK', 'rssPeak']);
			table(app, 'mp-phases', c, D.phases);
		}
		peaks();
		[['Owners', 'OWNER', 'owners'], ['Tags', 'TAG', 'tags']].forEach(function (o) {
			if (!D[o[2]].length) return;
			add(app, el('h2', null, o[0]));
			var c = [[o[1], 'name', 's'], ['ALLOC_BYTES', 'allocBytes'], ['LIVE_BYTES', 'liveBytes']];
			if (S) c.push(['±LIVE_BYTES', 'liveBytesStderr']);
			c.push(['PEAK_BYTES', 'peakBytes']);
			if (S) c.push(['±PEAK_BYTES', 'peakBytesStderr'], ['BIAS<=', 'peakBytesBiasBound']);
			c.push(['NET_BYTES', 'netBytes']);
			c.push.apply(c, MAPS_COLS);
			table(app, 'mp-' + o[2], c, D[o[2]], { sort: { col: 1, dir: -1 } });
		});
		var used = D.pools.filter(function (p) { return p.used; });
		if (D.pools.length) {
			add(app, el('h2', null, 'Pools and device memory'));
			add(app, el('div', { class: 'muted' }, 'A separate view: slices the program or a device runtime ' +
				'handed out. An arena\'s backing malloc is counted once, in the heap figures; device ' +
				'memory is in neither the heap nor RSS.'));
			table(app, 'mp-pools', [['POOL', 'name', 's'], ['KIND', 'kind', 's'], ['ALLOC_BYTES', 'allocBytes'],
				['LIVE_BYTES', 'liveBytes'], ['PEAK_BYTES', 'peakBytes'], ['NET_BYTES', 'netBytes'],
				['RESETS', 'resets']], used);
			var unused = D.pools.filter(function (p) { return !p.used; }).map(function (p) { return p.name; });
			if (unused.length) add(app, el('div', { class: 'muted' }, 'Declared but unused: ' + unused.join(', ')));
		}
		if (D.execs.length) {
			add(app, el('h2', null, 'Execs'));
			table(app, 'mp-execs', [['PATH', function (e) { return e.path || '?'; }, 's'],
				['AT_MS', function (e) { return ms(e.t); }, 'x', function (e) { return e.t; }],
				['TID', 'tid'], ['KERNELS_CLOSED', 'kernelsClosed']], D.execs);
		}
	}

	/* report.html#selftest drives the timeline with synthetic events, as a
	 * user would (wheel, drag, hover, click on the first kernel wide enough
	 * to hit), and writes what each did to data-mp-selftest. */
	function selftest() {
		var cv = TL.cv, r = cv.getBoundingClientRect(), out = [], v0 = TL.view.slice(), my = r.top + CHART_H / 2;
		function mouse(type, x, y, target) {
			(target || cv).dispatchEvent(new MouseEvent(type, { clientX: x, clientY: y, bubbles: true }));
		}
		cv.dispatchEvent(new WheelEvent('wheel', { deltaY: -100, clientX: r.left + TL.w / 2, clientY: my,
			bubbles: true, cancelable: true }));
		out.push('zoom ' + (TL.view[1] - TL.view[0] < v0[1] - v0[0] ? 'in' : 'none'));
		var v1 = TL.view.slice();
		mouse('mousedown', r.left + 100, my);
		mouse('mousemove', r.left + 300, my);
		mouse('mouseup', r.left + 300, my, window);
		out.push('pan ' + (TL.view[0] < v1[0] ? 'earlier' : 'none'));
		mouse('mousemove', r.left + TL.w / 2, my);
		out.push('tip ' + (TL.tip.textContent.split('\n')[1] || '').replace(/ [0-9,]+ B .*/, ''));
		TL.view = TL.home.slice();
		draw();
		var span = TL.view[1] - TL.view[0];
		for (var i = 0; i < N; i++) {
			var x0 = (INV.begin[i] - TL.view[0]) / span * TL.w, x1 = (INV.end[i] - TL.view[0]) / span * TL.w;
			if (x1 - x0 < 4 || x0 < 0 || x1 > TL.w) continue;
			var y = r.top + CHART_H + AXIS_H + PHASE_H + TL.lane[i] * LANE_H + 5;
			mouse('mousedown', r.left + (x0 + x1) / 2, y);
			mouse('mouseup', r.left + (x0 + x1) / 2, y, window);
			out.push('click ' + REG.msg.textContent.trim());
			break;
		}
		document.body.setAttribute('data-mp-selftest', out.join('; '));
	}

	/* The width of the charts, read once: reading a width makes the
	 * browser lay out the whole page, which is slow once the tables are in. */
	var PAGE_W = 1000;
	function measure() { PAGE_W = Math.max(300, (app.clientWidth || 1002) - 2); }

	/* Each part's time goes to data-mp-timings, for slow pages. */
	function main() {
		var steps = [header, summary, timeline, kernelTable, regionView, flame, others, draw];
		var names = ['header', 'summary', 'timeline', 'kernels', 'region', 'flame', 'others', 'draw'];
		var t = performance.now(), out = ['parse ' + (t - T0).toFixed(0)];
		document.body.appendChild(app);
		measure();
		steps.forEach(function (f, i) {
			f();
			var now = performance.now();
			out.push(names[i] + ' ' + (now - t).toFixed(0));
			t = now;
		});
		document.body.setAttribute('data-mp-timings', out.join(', '));
		/* report.html#region=NAME#N opens on that region */
		if (window.location.hash === '#selftest') selftest();
		var m = /^#region=(.+)$/.exec(window.location.hash);
		if (m) {
			var r = findRegion(decodeURIComponent(m[1]));
			if (r !== null) selectRegion(r);
		}
	}

	try {
		main();
	} catch (e) {
		noteError(String(e && e.stack || e));
	}
	document.body.setAttribute('data-mp-errors', String(errors.length));
	document.body.setAttribute('data-mp-render-ms', performance.now().toFixed(1));
	(function () { /* where the time went before the script: navigation entries */
		var nav = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
		if (nav) document.body.setAttribute('data-mp-nav', ['fetchStart', 'responseStart', 'responseEnd',
			'domInteractive'].map(function (k) { return k + ' ' + (nav[k] || 0).toFixed(0); }).join(', '));
	})();
	document.body.setAttribute('data-mp-ready', '1');
})();
