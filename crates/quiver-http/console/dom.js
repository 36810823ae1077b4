// DOM helpers shared by the console's modules: finding the page's elements by id.

/** The element of the page with id `id` (null if there is none). */
export const $ = (id) => document.getElementById(id);
