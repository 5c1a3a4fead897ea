/* Where the entity view puts each entity (app.js draws with it): the centre in the middle and
 * each hop on a ring around it (an ellipse, as views are wider than tall), an entity next to the ones
 * it links to on the hop before, the linked entities of one ring pulled next to each other
 * (fewer lines across the picture), and on a crowded ring every other entity a step further
 * out, so that neighbouring labels do not meet. No randomness: the same neighbourhood is
 * always the same picture, and far cheaper than cose's 1,000 iterations from a pile at the
 * origin (bench/RESULTS.md, d-page4).
 *
 * `memorydLayout.place(nodes, edges)` takes the graph route's nodes (`id`, `hop`) and edges
 * (`source`, `target`, `count`), and returns a Map from id to {x, y}.
 */
(function () {
  "use strict";

  const RING_GAP = 150; // between one hop's ring and the next
  const LABEL_ROOM = 104; // arc between two entities at one distance (a label's width)
  const NODE_ROOM = 36; // arc each entity takes at the least (a node and a margin)
  const STAGGER = 46; // between the distances of a crowded ring: more than a node and its
  // label are tall, so neighbours on the ring at different distances never meet
  const CROWDED = [12, 60]; // entities on a ring from which it takes 2, 3 distances
  const STRETCH = 1.3; // the ellipse: x radius / y radius = its square (views are wide)
  const PASSES = 6; // rounds that pull linked entities of one ring together
  const SPREAD_ROUNDS = 60; // rounds that push entities of one ring apart
  const TAU = 2 * Math.PI;

  function place(nodes, edges) {
    const links = new Map(nodes.map((n) => [n.id, new Map()]));
    for (const e of edges) {
      const a = links.get(e.source);
      const b = links.get(e.target);
      if (!a || !b || e.source === e.target) continue;
      // sqrt: a pair shared by hundreds of memories pulls, but does not drown every other link
      const w = Math.sqrt(e.count || 1);
      a.set(e.target, (a.get(e.target) || 0) + w);
      b.set(e.source, (b.get(e.source) || 0) + w);
    }
    const rings = [];
    for (const n of nodes) (rings[n.hop] = rings[n.hop] || []).push(n.id);
    const angle = new Map();
    const radius = new Map();
    const at = new Map();
    let r = 0;
    rings.forEach((ring, hop) => {
      if (!ring || !ring.length) return;
      if (hop === 0) {
        for (const id of ring) at.set(id, { x: 0, y: 0 });
        return;
      }
      const levels = 1 + CROWDED.filter((n) => ring.length >= n).length;
      const arc = Math.max(NODE_ROOM, LABEL_ROOM / levels);
      r = Math.max(r + RING_GAP, (ring.length * arc) / TAU);
      const inner = (id) => [...links.get(id)].filter(([o]) => angle.has(o) && radius.get(o) < r);
      // first: toward the entities they hang off (the first ring: in the route's order)
      let wanted = ring.map((id, i) => {
        const toward = inner(id);
        return toward.length ? mean(toward.map(([o, w]) => [angle.get(o), w])) : (TAU * i) / ring.length;
      });
      ring.forEach((id, i) => angle.set(id, wanted[i]));
      spread(ring, angle, arc / r);
      for (let pass = 0; pass < PASSES; pass++) {
        wanted = ring.map((id) => {
          const pulls = [[angle.get(id), 1]];
          for (const [o, w] of links.get(id)) {
            if (angle.has(o) && (ring.includes(o) || radius.get(o) < r)) pulls.push([angle.get(o), w]);
          }
          return mean(pulls);
        });
        ring.forEach((id, i) => angle.set(id, wanted[i]));
        spread(ring, angle, arc / r);
      }
      const order = [...ring].sort((a, b) => norm(angle.get(a)) - norm(angle.get(b)));
      const level = order.map((_, i) => i % levels);
      const n = order.length;
      if (levels > 1 && n > 2 && level[n - 1] === level[0]) {
        // the ring closes on two at one distance: the last takes one its neighbours do not have
        level[n - 1] = [1, 2].find((l) => l !== level[n - 2] && l !== level[0]);
      }
      order.forEach((id, i) => {
        const out = r + level[i] * STAGGER;
        radius.set(id, r);
        at.set(id, { x: STRETCH * out * Math.cos(angle.get(id)), y: (out * Math.sin(angle.get(id))) / STRETCH });
      });
      r += Math.max(...level) * STAGGER;
    });
    return at;
  }

  /** The circular mean of [angle, weight] pairs. */
  function mean(pairs) {
    let x = 0;
    let y = 0;
    for (const [a, w] of pairs) {
      x += w * Math.cos(a);
      y += w * Math.sin(a);
    }
    return x === 0 && y === 0 ? pairs[0][0] : Math.atan2(y, x);
  }

  /** Keep the ring's order but at least `gap` radians between neighbours (evenly spaced if
   * the ring has no more room): each round moves each close pair apart symmetrically. */
  function spread(ring, angle, gap) {
    const order = [...ring].sort((a, b) => norm(angle.get(a)) - norm(angle.get(b)) || (a < b ? -1 : 1));
    const n = order.length;
    if (n < 2) return;
    const a = order.map((id) => norm(angle.get(id)));
    if (n * gap >= TAU - 1e-9) {
      // full ring: evenly spaced, turned to move the entities as little as possible
      const turn = mean(a.map((x, i) => [x - (TAU * i) / n, 1]));
      order.forEach((id, i) => angle.set(id, turn + (TAU * i) / n));
      return;
    }
    for (let round = 0; round < SPREAD_ROUNDS; round++) {
      let moved = false;
      for (let i = 0; i < n; i++) {
        const j = (i + 1) % n;
        const d = j ? a[j] - a[i] : a[0] + TAU - a[i];
        if (d >= gap - 1e-9) continue;
        const push = (gap - d) / 2;
        a[i] -= push;
        a[j] += push;
        moved = true;
      }
      if (!moved) break;
    }
    order.forEach((id, i) => angle.set(id, a[i]));
  }

  function norm(x) {
    return ((x % TAU) + TAU) % TAU;
  }

  window.memorydLayout = { place };
})();
